#!/usr/bin/env bash
# Runs the whole test suite: formatting, lints (which also type-check benches), unit, integration,
# property and end-to-end tests.
# Installs what the tests need by itself, beyond the Rust toolchain: Python 3 venvs from PyPI with
# helm-python-sdk (the chart tests) and moto (the AWS emulator for the aws provider's tests).
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

# CloudFormation template test (crates/karpenter/tests/it/aws_iam.rs) lints `karpenter aws iam -o
# cloudformation` with PyPI's cfn-lint, in .venv-cfn/ (git-ignored). Pinned; skipped when present.
CFN_LINT_VERSION=1.58.0
install_cfn_venv() {
  local venv=.venv-cfn
  if "$venv/bin/python" -c "import cfnlint.version, sys; sys.exit(cfnlint.version.__version__ != '$CFN_LINT_VERSION')" 2>/dev/null; then
    return
  fi
  echo "== installing cfn-lint $CFN_LINT_VERSION into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "cfn-lint==$CFN_LINT_VERSION"
}
install_cfn_venv

# --- moto (AWS emulator) for crates/karpenter-aws integration tests -------------------------------
# Creates .venv-moto/ once (pinned moto; fast when present), starts tests/moto/moto_launcher.py on a free
# loopback port, exports KARPENTER_TEST_AWS_ENDPOINT for the tests and stops the launcher by PID on exit.
MOTO_VERSION="5.2.5"
MOTO_VENV=".venv-moto"
MOTO_PID=""
MOTO_LOG=""
start_moto() {
    if [[ "${KARPENTER_SKIP_MOTO:-}" == "1" ]]; then
        echo "== moto: skipped (KARPENTER_SKIP_MOTO=1)"
        return
    fi
    if ! "$MOTO_VENV/bin/python" -c "import moto, sys; sys.exit(moto.__version__ != '$MOTO_VERSION')" 2>/dev/null; then
        echo "== moto: installing moto[server]==$MOTO_VERSION into $MOTO_VENV"
        python3 -m venv "$MOTO_VENV"
        "$MOTO_VENV/bin/pip" install --quiet "moto[server]==$MOTO_VERSION"
    fi
    local port
    port="$("$MOTO_VENV/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    MOTO_LOG="$(mktemp -t moto-launcher.XXXXXX)"
    "$MOTO_VENV/bin/python" tests/moto/moto_launcher.py "$port" >"$MOTO_LOG" 2>&1 &
    MOTO_PID=$!
    trap stop_moto EXIT
    for _ in $(seq 1 150); do
        if grep -q "moto ready" "$MOTO_LOG"; then
            export KARPENTER_TEST_AWS_ENDPOINT="http://127.0.0.1:$port"
            echo "== moto: $(grep 'moto ready' "$MOTO_LOG") (pid $MOTO_PID)"
            return
        fi
        if ! kill -0 "$MOTO_PID" 2>/dev/null; then
            break
        fi
        sleep 0.2
    done
    echo "moto launcher did not start; its output:" >&2
    cat "$MOTO_LOG" >&2
    exit 1
}
stop_moto() {
    if [[ -n "$MOTO_PID" ]]; then
        kill "$MOTO_PID" 2>/dev/null || true
        wait "$MOTO_PID" 2>/dev/null || true
    fi
    if [[ -n "$MOTO_LOG" ]]; then
        rm -f "$MOTO_LOG"
    fi
}
# ---------------------------------------------------------------------------------------------------

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

start_moto

echo "== cargo test"
cargo test --workspace --locked
