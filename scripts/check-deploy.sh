#!/usr/bin/env bash
# Checks deploy/ without a container engine or a cluster: the Containerfile with hadolint, and
# the Kubernetes and KServe manifests against their schemas (scripts/check_deploy.py). Both tools
# come from the Python test environment (scripts/setup.sh --test prints its folder).
#
#   scripts/check-deploy.sh [VENV]
#
# The image itself is not built here: buildah installs from Debian's packages and runs as root,
# but the base images (docker.io/library/rust, debian) cannot be pulled on the project's machines,
# which reach no container registry. docs/deploy.md says how to build it where one is reachable.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-$(scripts/setup.sh --test)}
echo "hadolint Containerfile"
"$venv/bin/hadolint" Containerfile
"$venv/bin/python" scripts/check_deploy.py deploy/kubernetes
