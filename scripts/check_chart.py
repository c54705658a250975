#!/usr/bin/env python3
"""Checks the Helm chart charts/drover offline (run through scripts/check-chart).

a. Helm's linter (strict: warnings fail) on the default values and each charts/drover/ci/*.yaml, once
   for every Kubernetes version checked.
b. Renders the chart with each of those values files (release `drover`, namespace `drover`, the CRDs
   of crds/ included, as `helm template --include-crds` does).
c. Validates every rendered object against every Kubernetes version's schema with kubernetes-validate
   in strict mode (unknown fields fail). An object of a kind Kubernetes has no schema for (the
   Prometheus Operator's ServiceMonitor) gets a shape check only and is reported as skipped.
   Then a few checks of the chart's own promises: hardened pods, references to Secrets and
   ConfigMaps that exist when they are read, one checkpoint path for the server and executors.
d. Each values file in charts/drover/tests/ must be REJECTED, with a message that contains what its
   first line names (`# check-chart expects: <text>`), by both lint and render.
e. Validates every DroverJob in examples/k8s/ against the CRD's openAPIV3Schema (unknown fields fail,
   as `kubectl apply`'s strict field validation does), and every other object there with
   kubernetes-validate.

Helm comes from helm-python-sdk (Helm v4's Go SDK through a shared library: no helm binary).
Exits non-zero on any failure, naming the file, the object and the reason.
"""

from __future__ import annotations

import argparse
import copy
import functools
import glob
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field

import helm_python as helm
import jsonschema
import kubernetes_validate.utils as kv
import yaml

RELEASE = "drover"
NAMESPACE = "drover"
VERSIONS = [f"1.{minor}" for minor in range(30, 38)]
CRD_FILE = "crds/droverjob.yaml"
# The first line of a values file that must be rejected: by lint and render, or (`at render`) by
# render only, for a template's `fail`, which Helm's lint mode logs instead of failing.
EXPECT = re.compile(r"^#\s*check-chart expects( at render)?:\s*(.+?)\s*$")
# Kinds of custom resources the chart may render, which Kubernetes' schemas do not know.
FOREIGN_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor")}

# kubernetes-validate reads a 1.8 MB definitions file on every call: read each file once.
kv.schema_contents = functools.lru_cache(maxsize=None)(kv.schema_contents)


@dataclass
class Report:
    failures: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def ok(self, what: str) -> None:
        print(f"ok    {what}", flush=True)

    def fail(self, where: str, reason: str) -> None:
        line = f"{where}: {reason}".rstrip()
        self.failures.append(line)
        print(f"FAIL  {line}", flush=True)

    def skip(self, what: str) -> None:
        self.skipped.append(what)
        print(f"skip  {what}", flush=True)


def load_yaml_docs(text: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def describe(obj: dict) -> str:
    meta = obj.get("metadata") or {}
    name = meta.get("name", "?")
    ns = meta.get("namespace")
    return f"{obj.get('kind', '?')} {ns + '/' if ns else ''}{name}"


def lint_problems(report: dict) -> list[str]:
    """Lint findings that fail a strict lint: warnings (2) and errors (3), plus hard errors."""
    problems = [f"{m.get('path', '')}: {m.get('error', '').strip()}" for m in report.get("messages", [])
                if m.get("severity", 0) >= 2]
    problems += [e.strip() for e in report.get("errors", []) if e.strip() not in " ".join(problems)]
    return problems


# --- a, b: lint and render ------------------------------------------------------------------------

def lint(chart_dir: str, name: str, values: dict | None, out: Report) -> None:
    for version in VERSIONS:
        report = helm.lint(chart_dir, values, strict=True, namespace=NAMESPACE, kube_version=f"v{version}.0")
        for problem in lint_problems(report):
            out.fail(f"lint {name} (Kubernetes {version})", problem)
            return
    out.ok(f"lint {name} (strict, Kubernetes {VERSIONS[0]}–{VERSIONS[-1]})")


def render(chart: helm.Chart, values: dict | None) -> list[tuple[str, dict]]:
    """(source file, object) for every rendered object, the CRDs first (--include-crds)."""
    objects = []
    for crd in chart.crds:
        for doc in load_yaml_docs(crd["data"]):
            objects.append((crd["filename"], doc))
    rendered = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    for path, text in sorted(rendered.items()):
        if path.endswith("NOTES.txt"):
            continue
        for doc in load_yaml_docs(text):
            objects.append((path, doc))
    return objects


# --- c: Kubernetes schemas ------------------------------------------------------------------------

def shape_check(obj: dict) -> str | None:
    meta = obj.get("metadata")
    if not isinstance(obj.get("apiVersion"), str) or not isinstance(obj.get("kind"), str):
        return "apiVersion and kind must be strings"
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        return "metadata.name is missing"
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", meta["name"]):
        return f"metadata.name {meta['name']!r} is not a DNS-1123 subdomain"
    for key in ("labels", "annotations"):
        if key in meta and not all(isinstance(v, str) for v in (meta[key] or {}).values()):
            return f"metadata.{key} values must be strings"
    if not isinstance(obj.get("spec"), dict):
        return "spec must be an object"
    return None


def validate_k8s(source: str, obj: dict, out: Report, context: str = "") -> str:
    """Validates one object against every version: "ok", "skipped" or "failed"."""
    where = f"{context}{source}: {describe(obj)}"
    if (obj.get("apiVersion"), obj.get("kind")) in FOREIGN_KINDS:
        problem = shape_check(obj)
        if problem:
            out.fail(where, problem)
            return "failed"
        out.skip(f"{where}: no Kubernetes schema for {obj['apiVersion']} {obj['kind']} "
                 f"(apiVersion/kind/metadata/spec shape checked only)")
        return "skipped"
    for version in VERSIONS:
        try:
            kv.validate(obj, version, strict=True)
        except kv.ValidationError as err:
            path = ".".join(str(p) for p in err.path) or "(top)"
            out.fail(f"{where} (Kubernetes {version})", f"{path}: {err.message}")
            return "failed"
        except (kv.SchemaNotFoundError, kv.InvalidSchemaError, kv.VersionNotSupportedError) as err:
            out.fail(f"{where} (Kubernetes {version})", err.message)
            return "failed"
    return "ok"


# --- c: the chart's own promises ------------------------------------------------------------------

WORKLOADS = {"Deployment", "DaemonSet", "StatefulSet", "Job"}


def pod_spec(obj: dict) -> dict | None:
    if obj.get("kind") in WORKLOADS:
        return obj["spec"]["template"]["spec"]
    return None


def hook_phases(obj: dict) -> set[str]:
    hooks = ((obj.get("metadata") or {}).get("annotations") or {}).get("helm.sh/hook", "")
    return {h.strip() for h in hooks.split(",") if h.strip()}


def hook_weight(obj: dict) -> int:
    return int(((obj.get("metadata") or {}).get("annotations") or {}).get("helm.sh/hook-weight", "0"))


def check_promises(name: str, merged: dict, objects: list[tuple[str, dict]], out: Report) -> None:
    """`merged`: the values the chart rendered with, defaults included."""
    failures_before = len(out.failures)
    external = {  # Secrets the chart reads but the user provides.
        merged["auth"]["existingSecret"],
        merged["postgres"]["external"]["existingSecret"],
        merged["checkpoints"]["objectStore"]["existingSecret"],
    } - {""}
    rendered = {(o["kind"], o["metadata"]["name"]): o for _, o in objects}
    for source, obj in objects:
        spec = pod_spec(obj)
        if spec is None:
            continue
        where = f"{name}: {source}: {describe(obj)}"
        pre_install = "pre-install" in hook_phases(obj)
        for container in spec.get("containers", []) + spec.get("initContainers", []):
            ctx = container.get("securityContext") or {}
            cwhere = f"{where}: container {container['name']}"
            if ctx.get("readOnlyRootFilesystem") is not True or ctx.get("allowPrivilegeEscalation") is not False:
                out.fail(cwhere, "needs readOnlyRootFilesystem: true and allowPrivilegeEscalation: false")
            if "ALL" not in ((ctx.get("capabilities") or {}).get("drop") or []):
                out.fail(cwhere, "must drop ALL capabilities")
            if (ctx.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
                out.fail(cwhere, "needs seccompProfile RuntimeDefault")
            is_root_helper = container["name"] == "chown-host-paths"
            if not is_root_helper and ctx.get("runAsNonRoot") is not True:
                out.fail(cwhere, "must run as non-root")
            if is_root_helper and set((ctx.get("capabilities") or {}).get("add") or []) - {"CHOWN"}:
                out.fail(cwhere, "the root helper may add CHOWN only")
            # Every Secret and ConfigMap read must be rendered by the chart or provided by the user,
            # and a pre-install hook can only read user Secrets or earlier hooks of its own.
            refs = []  # (kind, name, key or None)
            for env in container.get("env", []):
                src = env.get("valueFrom") or {}
                if "secretKeyRef" in src:
                    refs.append(("Secret", src["secretKeyRef"]["name"], src["secretKeyRef"]["key"]))
                if "configMapKeyRef" in src:
                    refs.append(("ConfigMap", src["configMapKeyRef"]["name"], src["configMapKeyRef"]["key"]))
            for env_from in container.get("envFrom", []):
                if "secretRef" in env_from:
                    refs.append(("Secret", env_from["secretRef"]["name"], None))
                if "configMapRef" in env_from:
                    refs.append(("ConfigMap", env_from["configMapRef"]["name"], None))
            for kind, ref, key in refs:
                target = rendered.get((kind, ref))
                if target is None and not (kind == "Secret" and ref in external):
                    out.fail(cwhere, f"reads {kind} {ref}, which neither the chart renders nor values name")
                elif target is not None and key is not None and key not in {
                        **(target.get("data") or {}), **(target.get("stringData") or {})}:
                    out.fail(cwhere, f"reads key {key} of {kind} {ref}, which has no such key")
                elif target is not None and pre_install and not (
                        "pre-install" in hook_phases(target) and hook_weight(target) < hook_weight(obj)):
                    out.fail(cwhere, f"is a pre-install hook but reads {kind} {ref}, which does not exist yet")
        # One checkpoint directory for the server and every executor; or one object store, which
        # the server names and both reach with the same settings.
        object_store = merged["checkpoints"]["type"] == "objectStore"
        for container in spec.get("containers", []):
            mounts = {m["name"]: m["mountPath"] for m in container.get("volumeMounts", [])}
            env = {e["name"]: e.get("value") for e in container.get("env", [])}
            if object_store and container["name"] in ("server", "executor"):
                settings = merged["checkpoints"]["objectStore"]
                if "checkpoints" in mounts:
                    out.fail(f"{where}: container {container['name']}", "mounts a checkpoint volume beside the object store")
                if container["name"] == "server" and env.get("DROVER_CHECKPOINT_STORE") != settings["url"]:
                    out.fail(f"{where}: container server", "DROVER_CHECKPOINT_STORE is not checkpoints.objectStore.url")
                if settings["endpoint"] and env.get("AWS_ENDPOINT_URL") != settings["endpoint"]:
                    out.fail(f"{where}: container {container['name']}", "AWS_ENDPOINT_URL is not checkpoints.objectStore.endpoint")
                secrets = [e["secretRef"]["name"] for e in container.get("envFrom", []) if "secretRef" in e]
                if settings["existingSecret"] and settings["existingSecret"] not in secrets:
                    out.fail(f"{where}: container {container['name']}", "does not read the object store's credentials Secret")
            elif container["name"] in ("server", "executor"):
                path = mounts.get("checkpoints")
                if path != "/var/lib/drover/checkpoints":
                    out.fail(f"{where}: container {container['name']}",
                             f"checkpoints mounted at {path}, not /var/lib/drover/checkpoints")
                if container["name"] == "server" and env.get("DROVER_CHECKPOINT_DIR") != path:
                    out.fail(f"{where}: container server", "DROVER_CHECKPOINT_DIR is not the checkpoint mount")
        # Only the DroverJob controller (in the server) and, when asked to read their node's labels,
        # the executors may talk to the Kubernetes API.
        wants_token = ((obj["kind"] == "Deployment" and merged["controller"]["enabled"])
                       or (obj["kind"] == "DaemonSet" and merged["executor"]["kubernetesNodeLabels"]))
        if spec.get("automountServiceAccountToken") is not wants_token:
            out.fail(where, f"automountServiceAccountToken should be {str(wants_token).lower()}")
    for (kind, obj_name), obj in rendered.items():
        if kind == "Service" and len(obj_name) > 63:
            out.fail(f"{name}: Service {obj_name}", "name longer than 63 characters")
    if len(out.failures) == failures_before:
        out.ok(f"promises {name} (hardened pods, references, checkpoint path, API tokens)")


# --- a: every value documented -------------------------------------------------------------------

# Kubernetes' own shapes (container resources, affinity): documented by the value that holds them.
KUBERNETES_SHAPES = {"resources", "affinity"}


def closed_object(schema: dict, root: dict) -> dict | None:
    """The schema itself, or what its $ref/allOf names, when it is one of the chart's own objects
    with declared properties."""
    while True:
        if "$ref" in schema:
            name = schema["$ref"].rsplit("/", 1)[1]
            if name in KUBERNETES_SHAPES:
                return None
            schema = root["definitions"][name]
        elif "allOf" in schema and len(schema["allOf"]) == 1:
            schema = schema["allOf"][0]
        else:
            break
    return schema if "properties" in schema else None


def check_documented(chart_dir: str, out: Report) -> None:
    """Every key of values.yaml that the schema declares has a comment right above it, and every
    value the schema declares is in values.yaml."""
    path = os.path.join(chart_dir, "values.yaml")
    lines = open(path).read().splitlines()
    schema = json.load(open(os.path.join(chart_dir, "values.schema.json")))
    undocumented = []

    def walk(node: yaml.Node, node_schema: dict, prefix: str) -> None:
        if not isinstance(node, yaml.MappingNode):
            return
        present = {key_node.value for key_node, _ in node.value}
        for key in sorted(set(node_schema["properties"]) - present - {"global"}):
            undocumented.append(f"{prefix}{key} (in the schema, missing from values.yaml)")
        for key_node, value_node in node.value:
            key = key_node.value
            line = key_node.start_mark.line
            above = lines[line - 1].strip() if line > 0 else ""
            # A key that starts a list item (`- host: ...`) is documented by its list's comment.
            if not above.startswith("#") and not lines[line].lstrip().startswith("-"):
                undocumented.append(f"{prefix}{key} (line {line + 1})")
            child = node_schema["properties"].get(key)
            sub = closed_object(child, schema) if child else None
            if sub:
                walk(value_node, sub, f"{prefix}{key}.")

    walk(yaml.compose(open(path)), schema, "")
    if undocumented:
        out.fail(path, "values without a comment right above them: " + ", ".join(undocumented))
    else:
        out.ok(f"{os.path.relpath(path)}: every value documented")


# --- d: values the schema must reject -------------------------------------------------------------

def expect_rejected(chart_dir: str, chart: helm.Chart, path: str, out: Report) -> None:
    with open(path) as f:
        first = f.readline()
    match = EXPECT.match(first)
    if not match:
        out.fail(path, "first line must be `# check-chart expects[ at render]: <text of the error>`")
        return
    render_only, expected = bool(match.group(1)), match.group(2)
    values = yaml.safe_load(open(path)) or {}
    if not render_only:
        problems = lint_problems(helm.lint(chart_dir, values, strict=True, namespace=NAMESPACE))
        if not any(expected in p for p in problems):
            out.fail(f"lint {path}", f"expected an error mentioning {expected!r}, got {problems or 'none'}")
            return
    try:
        chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    except helm.HelmError as err:
        if expected not in str(err):
            out.fail(f"render {path}", f"failed, but without {expected!r}: {err}")
            return
    else:
        out.fail(f"render {path}", "rendered; the values should have been rejected")
        return
    out.ok(f"rejected {os.path.basename(path)} ({'render' if render_only else 'lint and render'}: {expected!r})")


# --- e: examples against the CRD ------------------------------------------------------------------

def json_schema_of(openapi: dict, in_combinator: bool = False) -> dict:
    """An OpenAPI v3 structural schema as JSON Schema: `nullable` becomes a null type,
    x-kubernetes-int-or-string an integer-or-string, and an object with properties that does not
    preserve unknown fields is closed (unknown fields fail, as kubectl's strict field validation
    does). Branches of oneOf/anyOf/allOf stay open: their properties also live in the parent."""
    if isinstance(openapi, list):
        return [json_schema_of(item, in_combinator) for item in openapi]
    if not isinstance(openapi, dict):
        return openapi
    schema = {}
    for key, value in openapi.items():
        if key in ("properties", "patternProperties", "definitions"):
            schema[key] = {k: json_schema_of(v) for k, v in value.items()}
        elif key in ("oneOf", "anyOf", "allOf"):
            schema[key] = [json_schema_of(v, True) for v in value]
        elif key in ("items", "additionalProperties", "not"):
            schema[key] = json_schema_of(value) if isinstance(value, (dict, list)) else value
        elif not key.startswith("x-kubernetes-") and key != "nullable":
            schema[key] = value
    if openapi.get("x-kubernetes-int-or-string"):
        schema.pop("type", None)
        schema["anyOf"] = schema.get("anyOf", []) + [{"type": "integer"}, {"type": "string"}]
    if openapi.get("nullable") and "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        schema["type"] = types + ["null"]
        if "enum" in schema:
            schema["enum"] = list(schema["enum"]) + [None]
    if ("properties" in schema and "additionalProperties" not in schema and not in_combinator
            and not openapi.get("x-kubernetes-preserve-unknown-fields")):
        schema["additionalProperties"] = False
    return schema


def check_examples(crd_path: str, examples: list[str], out: Report) -> int:
    crds = [d for d in load_yaml_docs(open(crd_path).read()) if d.get("kind") == "CustomResourceDefinition"]
    if len(crds) != 1:
        out.fail(crd_path, f"expected one CustomResourceDefinition, found {len(crds)}")
        return 0
    crd = crds[0]
    group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
    schemas = {}
    for version in crd["spec"]["versions"]:
        openapi = ((version.get("schema") or {}).get("openAPIV3Schema"))
        if not openapi:
            out.fail(crd_path, f"version {version['name']} has no openAPIV3Schema")
            continue
        schema = json_schema_of(openapi)
        # The API server adds these to every custom resource's schema.
        schema.setdefault("properties", {})
        for key, kind_of in (("apiVersion", "string"), ("kind", "string"), ("metadata", "object")):
            schema["properties"].setdefault(key, {"type": kind_of})
        jsonschema.Draft7Validator.check_schema(schema)
        schemas[f"{group}/{version['name']}"] = (version, jsonschema.Draft7Validator(schema))
    count = 0
    for path in examples:
        for obj in load_yaml_docs(open(path).read()):
            count += 1
            where = f"{path}: {describe(obj)}"
            if str(obj.get("apiVersion", "")).startswith(f"{group}/") and obj.get("kind") != kind:
                out.fail(where, f"kind {obj.get('kind')!r}: the CRD of {group} defines {kind!r}")
                continue
            if obj.get("kind") != kind:
                if validate_k8s(path, obj, out) == "ok":
                    out.ok(f"example {where} (Kubernetes {VERSIONS[0]}–{VERSIONS[-1]})")
                continue
            if obj.get("apiVersion") not in schemas:
                out.fail(where, f"apiVersion {obj.get('apiVersion')!r} is not one the CRD serves "
                                f"({', '.join(schemas) or 'none'})")
                continue
            version, validator = schemas[obj["apiVersion"]]
            if not version.get("served"):
                out.fail(where, f"version {version['name']} is not served")
                continue
            name = (obj.get("metadata") or {}).get("name", "")
            if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", name):
                out.fail(where, f"metadata.name {name!r} is not a DNS-1123 label")
                continue
            errors = sorted(validator.iter_errors(obj), key=lambda e: list(e.path))
            for err in errors:
                path_text = ".".join(str(p) for p in err.path) or "(top)"
                out.fail(where, f"{path_text}: {err.message}")
            if not errors:
                out.ok(f"example {where} (CRD {obj['apiVersion']} schema)")
    return count


# --- main -----------------------------------------------------------------------------------------

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chart", default="charts/drover", help="the chart directory")
    parser.add_argument("--examples", default="examples/k8s", help="the DroverJob examples")
    args = parser.parse_args()
    started = time.monotonic()
    out = Report()
    chart_dir = args.chart

    crd_path = os.path.join(chart_dir, CRD_FILE)
    if not os.path.isfile(crd_path):
        print(f"FAIL  {crd_path} is missing: generate it with `drover crd > {crd_path}`", file=sys.stderr)
        return 1
    print(f"==> Helm {helm.helm_sdk_version()} (helm-python-sdk {helm.__version__}), "
          f"kubernetes-validate {kv.__version__}, Kubernetes {', '.join(VERSIONS)}", flush=True)

    chart_meta = yaml.safe_load(open(os.path.join(chart_dir, "Chart.yaml")))
    floor = re.fullmatch(r">=\s*(\d+)\.(\d+)\.\d+(-0)?", chart_meta.get("kubeVersion", ""))
    if not floor or [int(floor.group(1)), int(floor.group(2))] > [int(p) for p in VERSIONS[0].split(".")]:
        out.fail(f"{chart_dir}/Chart.yaml", f"kubeVersion {chart_meta.get('kubeVersion')!r} should be "
                                             f">={VERSIONS[0]}.0-0, the oldest version checked")

    check_documented(chart_dir, out)
    chart = helm.Chart.load(chart_dir)
    values_files = [("default values", None)] + [
        (os.path.relpath(p), p) for p in sorted(glob.glob(os.path.join(chart_dir, "ci", "*.yaml")))]
    manifests = 0
    for name, path in values_files:
        values = yaml.safe_load(open(path)) if path else None
        lint(chart_dir, name, values, out)
        try:
            objects = render(chart, values)
        except helm.HelmError as err:
            out.fail(f"render {name}", str(err))
            continue
        results = [validate_k8s(source, obj, out, f"{name}: ") for source, obj in objects]
        manifests += len(objects)
        if "failed" not in results:
            kinds = sorted({obj["kind"] for _, obj in objects})
            out.ok(f"render {name}: {results.count('ok')} objects valid in every version, "
                   f"{results.count('skipped')} skipped ({', '.join(kinds)})")
        check_promises(name, chart.merge_values(values), objects, out)

    rejected = sorted(glob.glob(os.path.join(chart_dir, "tests", "*.yaml")))
    if not any(os.path.basename(p) == "typo-values.yaml" for p in rejected):
        out.fail(f"{chart_dir}/tests", "typo-values.yaml is missing")
    for path in rejected:
        expect_rejected(chart_dir, chart, path, out)

    examples = sorted(glob.glob(os.path.join(args.examples, "*.yaml")))
    if not examples:
        out.fail(args.examples, "no examples found")
    example_count = check_examples(crd_path, examples, out)

    elapsed = time.monotonic() - started
    print(f"chart: {manifests} manifests × {len(VERSIONS)} Kubernetes versions validated, "
          f"{len(values_files)} values files, {example_count} examples, {len(rejected)} rejected values files, "
          f"{len(out.skipped)} skipped, {len(out.failures)} failures ({elapsed:.1f}s)")
    if out.failures:
        print("\nFailures:", file=sys.stderr)
        for line in out.failures:
            print(f"  {line}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
