"""The conformance harness: runs Triton's QA suites (qa/L0_*) unchanged against nereus. See
docs/conformance.md; conformance/run.sh is the command."""
