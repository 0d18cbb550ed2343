"""Writes the trimmed OpenAPI schemas of the custom resources deploy/kubernetes uses, from the
CRD YAML files of their projects, so that scripts/check_deploy.py validates the manifests offline.

    python3 deploy/kubernetes/schemas/vendor.py REPO COMMIT PATH_IN_REPO CRD_FILE [KEEP ...]

writes <kind>.<version>.json here: the storage version's openAPIV3Schema with every
`description` removed (they are most of the size) and `status` unchecked. Where KEEP names are given (for
InferenceService, whose every model format embeds a whole container spec), `spec.predictor`
keeps the full schema of those properties only; its other properties, and `spec.transformer`,
`spec.explainer` and `spec.canary`, accept any object (they go unchecked). The header records where it came
from.
"""
import json
import os
import sys

import yaml

ANY_OBJECT = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def strip(node):
    if isinstance(node, dict):
        return {k: strip(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [strip(v) for v in node]
    return node


def main():
    repo, commit, path, crd_file, *keep = sys.argv[1:]
    crd = next(d for d in yaml.safe_load_all(open(crd_file)) if d)
    version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
    schema = strip(version["schema"]["openAPIV3Schema"])
    trimmed = []
    # A manifest has no status: the controller writes it.
    if "status" in schema.get("properties", {}):
        schema["properties"]["status"] = ANY_OBJECT
        trimmed.append("status")
    if keep:
        spec = schema["properties"]["spec"]["properties"]
        predictor = spec["predictor"]["properties"]
        for name in list(predictor):
            if name not in keep and predictor[name].get("type") in ("object", "array"):
                predictor[name] = ANY_OBJECT
                trimmed.append(f"spec.predictor.{name}")
        for name in ("transformer", "explainer", "canary"):
            if name in spec:
                spec[name] = ANY_OBJECT
                trimmed.append(f"spec.{name}")
    kind = crd["spec"]["names"]["kind"]
    # The header first: where the schema came from.
    out = {
        "source": {"repository": repo, "commit": commit, "path": path, "version": version["name"]},
        "group": crd["spec"]["group"],
        "kind": kind,
        "note": "openAPIV3Schema without descriptions; unchecked (any object): " + (", ".join(trimmed) or "nothing"),
        "schema": schema,
    }
    name = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{kind}.{version['name']}.json")
    with open(name, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print(name, os.path.getsize(name))


if __name__ == "__main__":
    main()
