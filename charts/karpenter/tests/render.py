#!/usr/bin/env python3
"""Renders and lints the chart with Helm's own engine (PyPI `helm-python-sdk`, Helm 4 as a library).

Driven by the Rust test `crates/karpenter/tests/it/chart.rs`, which parses every object with the
k8s-openapi types; run `./scripts/test.sh` once to create the venv (`.venv-helm/`).

  render.py render [--name N] [--namespace NS] [-f VALUES.yaml]... [--set EXPR]...
      prints {"objects": [{"source": template, "object": {...}}...], "lint": {...}} as JSON;
      a failed render prints the error on stderr and exits 3 (like `helm template`).
  render.py deploy [--write]
      the committed sim rendering of deploy/rbac and deploy/controller, as {path: text} JSON
      (or, with --write, writes the files).
"""

import argparse
import json
import pathlib
import sys

import helm_python
import yaml

REPO = pathlib.Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "karpenter"
DEPLOY = REPO / "deploy"
# Values of the committed sim rendering in deploy/ (kept in the repo so it is reviewed too).
DEPLOY_VALUES = DEPLOY / "values-sim.yaml"
# Where each template's rendering goes under deploy/.
DEPLOY_FILES = {
    "serviceaccount.yaml": "rbac/serviceaccount.yaml",
    "clusterrole.yaml": "rbac/clusterrole.yaml",
    "role.yaml": "rbac/role.yaml",
    "rbac-sim.yaml": "rbac/sim.yaml",
    "deployment.yaml": "controller/deployment.yaml",
    "poddisruptionbudget.yaml": "controller/poddisruptionbudget.yaml",
    "service.yaml": "controller/service.yaml",
}
GENERATED_HEADER = (
    "# Generated from charts/karpenter with deploy/values-sim.yaml (release karpenter, namespace\n"
    "# karpenter); do not edit. Regenerate: .venv-helm/bin/python charts/karpenter/tests/render.py deploy --write\n"
)


def merge(base, overlay):
    """Deep merge like Helm's repeated -f/--set: later values win, maps merge."""
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            merge(base[key], value)
        else:
            base[key] = value
    return base


def values_of(files, sets):
    values = {}
    for path in files:
        merge(values, helm_python.values_from_yaml(pathlib.Path(path).read_text()))
    for expression in sets:
        merge(values, helm_python.parse_set_string(expression))
    return values


def render(values, name, namespace):
    chart = helm_python.Chart.load(str(CHART))
    return chart.render(values, name=name, namespace=namespace, is_install=True)


def command_render(args):
    values = values_of(args.values, args.set)
    try:
        manifests = render(values, args.name, args.namespace)
    except helm_python.HelmError as error:
        print(f"Error: {error}", file=sys.stderr)
        return 3
    objects = []
    for source, text in sorted(manifests.items()):
        for document in yaml.safe_load_all(text):
            if document is not None:
                objects.append({"source": source, "object": document})
    lint = helm_python.lint(str(CHART), values, namespace=args.namespace)
    json.dump({"objects": objects, "lint": lint}, sys.stdout)
    return 0


def deploy_files():
    values = values_of([DEPLOY_VALUES], [])
    manifests = render(values, "karpenter", "karpenter")
    files = {}
    for template, target in DEPLOY_FILES.items():
        text = manifests[f"karpenter/templates/{template}"].strip("\n")
        files[f"deploy/{target}"] = GENERATED_HEADER + text + "\n"
    return files


def command_deploy(args):
    files = deploy_files()
    if args.write:
        for path, text in files.items():
            (REPO / path).parent.mkdir(parents=True, exist_ok=True)
            (REPO / path).write_text(text)
            print(f"wrote {path}")
    else:
        json.dump(files, sys.stdout)
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    render_parser = commands.add_parser("render")
    render_parser.add_argument("--name", default="karpenter")
    render_parser.add_argument("--namespace", default="karpenter")
    render_parser.add_argument("-f", "--values", action="append", default=[])
    render_parser.add_argument("--set", action="append", default=[])
    deploy_parser = commands.add_parser("deploy")
    deploy_parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    return command_render(args) if args.command == "render" else command_deploy(args)


if __name__ == "__main__":
    sys.exit(main())
