"""Checks deploy/kubernetes without a cluster: every manifest against the Kubernetes schemas
(kubernetes-validate, strict: unknown fields are errors) or, for custom resources, against the
CRD schemas vendored in deploy/kubernetes/schemas (made as strict); then what the manifests must
agree on with Nereus itself (probes on /v2/health/*, a grace period that covers
--exit-timeout-secs, the formats and protocol the KServe runtime declares, the kustomization
listing every file). Each check is also run on a broken copy of a manifest, which it must reject,
so that a check that cannot fail is caught.

    python3 scripts/check_deploy.py [deploy/kubernetes]
"""
import copy
import glob
import json
import os
import sys

import jsonschema
import kubernetes_validate
import yaml

K8S_VERSION = "1.37.0"


def strict(schema):
    """The schema with unknown properties refused where the CRD lists properties and does not
    keep unknown fields (what `kubectl apply --validate=strict` does)."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items()}
    if "properties" in out and "additionalProperties" not in out and not out.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    # metadata is an ObjectMeta the CRD does not spell out.
    if isinstance(out.get("properties"), dict) and "metadata" in out["properties"] and "apiVersion" in out["properties"]:
        out["properties"]["metadata"] = {"type": "object"}
    return out


def load_schemas(folder):
    schemas = {}
    for path in glob.glob(os.path.join(folder, "schemas", "*.json")):
        with open(path) as f:
            vendored = json.load(f)
        api = f"{vendored['group']}/{vendored['source']['version']}"
        schemas[(api, vendored["kind"])] = strict(vendored["schema"])
    return schemas


def validate(doc, schemas):
    """The errors of one manifest document (empty when it is valid)."""
    key = (doc.get("apiVersion"), doc.get("kind"))
    if key in schemas:
        validator = jsonschema.Draft7Validator(schemas[key])
        return [f"{'.'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}" for e in validator.iter_errors(doc)]
    try:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    except kubernetes_validate.SchemaNotFoundError:
        return [f"no schema for {key[0]} {key[1]} (vendor its CRD's into deploy/kubernetes/schemas)"]
    except kubernetes_validate.ValidationError as e:
        # Its first line says what and where; the rest is the whole schema.
        return [str(e).splitlines()[0]]
    return []


def documents(folder):
    for path in sorted(glob.glob(os.path.join(folder, "**", "*.yaml"), recursive=True)):
        if os.path.basename(path) == "kustomization.yaml":
            continue
        with open(path) as f:
            for doc in yaml.safe_load_all(f):
                if doc:
                    yield os.path.relpath(path, folder), doc


def find(docs, kind, name=None):
    return [d for _, d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]


def flag(args, name):
    """The value of `--name=value` among container args."""
    prefix = f"--{name}="
    return next((a[len(prefix):] for a in args if a.startswith(prefix)), None)


def agreements(docs, folder):
    """What the manifests must agree on with Nereus, as failure messages."""
    failures = []
    for d in find(docs, "Deployment"):
        pod = d["spec"]["template"]["spec"]
        (container,) = [c for c in pod["containers"] if c["name"] == "nereus"]
        probe = lambda kind: container.get(kind, {}).get("httpGet", {}).get("path")  # noqa: E731
        if probe("readinessProbe") != "/v2/health/ready":
            failures.append("Deployment: the readiness probe is not GET /v2/health/ready")
        if probe("livenessProbe") != "/v2/health/live":
            failures.append("Deployment: the liveness probe is not GET /v2/health/live")
        exit_timeout = int(flag(container.get("args", []), "exit-timeout-secs") or 30)
        pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
        if pod.get("terminationGracePeriodSeconds", 30) < pre_stop + exit_timeout:
            failures.append(
                f"Deployment: terminationGracePeriodSeconds {pod.get('terminationGracePeriodSeconds', 30)} "
                f"is shorter than the preStop pause ({pre_stop}) plus --exit-timeout-secs ({exit_timeout})"
            )
        if flag(container.get("args", []), "model-repository") != "$(MODEL_REPOSITORY)":
            failures.append("Deployment: --model-repository is not the ConfigMap's MODEL_REPOSITORY")
        ports = {p.get("name") for p in container.get("ports", [])}
        if ports != {"http", "grpc", "metrics"}:
            failures.append(f"Deployment: the container's ports are {sorted(ports)}, not http, grpc, metrics")
    configs = find(docs, "ConfigMap", "nereus")
    if not configs or "MODEL_REPOSITORY" not in configs[0]["data"]:
        failures.append("ConfigMap nereus: no MODEL_REPOSITORY")
    for d in find(docs, "ServiceMonitor"):
        if {e["port"] for e in d["spec"]["endpoints"]} != {"metrics"}:
            failures.append("ServiceMonitor: does not scrape the metrics port")
    for d in find(docs, "ClusterServingRuntime"):
        formats = {f["name"] for f in d["spec"]["supportedModelFormats"]}
        if not {"onnx", "triton", "wasm"} <= formats:
            failures.append(f"ClusterServingRuntime: formats {sorted(formats)} lack onnx, triton or wasm")
        if "v2" not in d["spec"]["protocolVersions"]:
            failures.append("ClusterServingRuntime: not the v2 protocol")
    runtimes = {d["metadata"]["name"] for d in find(docs, "ClusterServingRuntime")}
    for d in find(docs, "InferenceService"):
        if d["spec"]["predictor"]["model"].get("runtime") not in runtimes:
            failures.append("InferenceService: its runtime is not the ClusterServingRuntime here")
    with open(os.path.join(folder, "kustomization.yaml")) as f:
        listed = set(yaml.safe_load(f)["resources"])
    top = {os.path.basename(p) for p in glob.glob(os.path.join(folder, "*.yaml"))} - {"kustomization.yaml"}
    if listed != top:
        failures.append(f"kustomization.yaml lists {sorted(listed)}, the folder has {sorted(top)}")
    return failures


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else "deploy/kubernetes"
    schemas = load_schemas(folder)
    docs = list(documents(folder))
    passed = failed = 0
    for path, doc in docs:
        errors = validate(doc, schemas)
        name = f"{path}: {doc['kind']}/{doc['metadata']['name']}"
        print(f"{'FAIL' if errors else 'ok  '} {name}" + "".join(f"\n       {e}" for e in errors))
        failed += bool(errors)
        passed += not errors
        # The same document with a field its kind does not have (in its spec, where it has one)
        # must be refused.
        broken = copy.deepcopy(doc)
        target = broken["spec"] if isinstance(broken.get("spec"), dict) else broken
        target["notAField"] = 1
        if not validate(broken, schemas):
            print(f"FAIL {name}: a copy with an unknown field passed validation")
            failed += 1
    for failure in agreements(docs, folder):
        print(f"FAIL {failure}")
        failed += 1
    # The agreements must catch a Deployment whose grace period is too short.
    short = copy.deepcopy(docs)
    for _, d in short:
        if d["kind"] == "Deployment":
            d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 1
    if not any("terminationGracePeriodSeconds" in f for f in agreements(short, folder)):
        print("FAIL the grace-period check passed a 1 s grace period")
        failed += 1
    kinds = sorted({d["kind"] for _, d in docs})
    print(f"deploy/kubernetes: {len(docs)} documents ({', '.join(kinds)})")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
