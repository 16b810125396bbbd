#!/usr/bin/env bash
# Runs the whole test suite: formatting, lints (which also type-check benches), unit, integration,
# property and end-to-end tests.
# Installs what the tests need by itself (beyond the Rust toolchain: Python 3 venvs from PyPI).
set -euo pipefail
cd "$(dirname "$0")/.."

# Helm chart tests (crates/karpenter/tests/it/chart.rs) render charts/karpenter with Helm 4's
# engine from PyPI's helm-python-sdk, in .venv-helm/ (git-ignored). Pinned; skipped when present.
HELM_PYTHON_SDK_VERSION=0.2.2
PYYAML_VERSION=6.0.3
install_helm_venv() {
  local venv=.venv-helm
  if "$venv/bin/python" -c "import helm_python, yaml, sys; sys.exit(helm_python.__version__ != '$HELM_PYTHON_SDK_VERSION' or yaml.__version__ != '$PYYAML_VERSION')" 2>/dev/null; then
    return
  fi
  echo "== installing helm-python-sdk $HELM_PYTHON_SDK_VERSION into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
    "helm-python-sdk==$HELM_PYTHON_SDK_VERSION" "PyYAML==$PYYAML_VERSION"
}
install_helm_venv

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== cargo test"
cargo test --workspace --locked
