#!/usr/bin/env bash
# Runs the whole test suite: formatting, lints (which also type-check benches), unit, integration,
# property and end-to-end tests, with the `aws` feature of the `karpenter` binary on (the aws
# provider) and, for the checks of the default build, off.
# Installs what the tests need by itself, beyond the Rust toolchain: Python 3 venvs from PyPI with
# helm-python-sdk (the chart tests), cfn-lint and parliament (the IAM outputs' linters) and moto
# (the AWS emulator for the aws provider's tests), and Debian's prometheus package (the Prometheus test).
#
# Every step runs even when an earlier one failed (`cargo test --no-fail-fast`); the run ends with
# each step's result, the failing tests and targets, and a count of the tests, and exits non-zero
# when anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."

# The output snapshots (crates/karpenter/tests/it/snapshots.rs) are compared, never written: a
# difference fails the test and leaves no `.snap.new` behind. To accept a deliberate change, run
# the tests once with INSTA_UPDATE=always and review the diff of the `.snap` files.
export INSTA_UPDATE=no

STEP_LOG_DIR="$(mktemp -d -t karpenter-test.XXXXXX)"
STEP_NAMES=()
STEP_RESULTS=()

# run_step NAME COMMAND...: runs the command, its output shown and kept for the summary.
run_step() {
    local name="$1"
    shift
    local log="$STEP_LOG_DIR/${#STEP_NAMES[@]}.log"
    echo "== $name"
    "$@" 2>&1 | tee "$log"
    local status="${PIPESTATUS[0]}"
    STEP_NAMES+=("$name")
    if [[ "$status" == 0 ]]; then
        STEP_RESULTS+=("ok")
    else
        STEP_RESULTS+=("FAILED (exit $status)")
    fi
    return 0
}

# retry_failed_tests COMMAND...: after the step just run (a real-control-plane step), runs each
# test that failed in it once more, alone, with COMMAND followed by `-- --exact NAME`. A test
# that passes alone is flaky, not failing: a real control plane on a shared 2-core machine is
# sometimes starved past a wait. It is listed in the summary with its first failure; the step
# passes only if every failing test passed on its rerun (a crash with no failing test line stays
# a failure).
FLAKY_LIST="$STEP_LOG_DIR/flaky.list"
retry_failed_tests() {
    local last=$((${#STEP_NAMES[@]} - 1))
    [[ "${STEP_RESULTS[$last]}" == ok ]] && return 0
    local log="$STEP_LOG_DIR/$last.log" failing name all_passed=1 count=0
    failing="$(grep -E '^test .* \.\.\. FAILED$' "$log" | sed -E 's/^test (.*) \.\.\. FAILED$/\1/' | sort -u)"
    [[ -n "$failing" ]] || return 0
    # Only the failing tests: a target that crashed besides them is still a failure.
    if grep -qE '^error: [0-9]+ targets? failed:' "$log" \
        && [[ "$(grep -cE '^test result: FAILED' "$log")" != "$(awk '/^error: [0-9]+ targets? failed:/ {on=1; next} on && /^    / {n++; next} {on=0} END {print n + 0}' "$log")" ]]; then
        return 0
    fi
    while read -r name; do
        echo "== rerun alone: $name"
        # The test's own line and the result of the binary that ran it: cargo runs every test
        # binary of the workspace, and the others' "0 passed; N filtered out" would read as if
        # nothing ran.
        if "$@" -- --exact "$name" --test-threads 1 2>&1 \
            | grep -E "^test $name \.\.\. |^test result: .* [1-9][0-9]* (passed|failed);|^error" \
            | sed 's/^/    /'; [[ "${PIPESTATUS[0]}" == 0 ]]; then
            echo "$name" >>"$FLAKY_LIST"
            count=$((count + 1))
        else
            all_passed=0
        fi
    done <<<"$failing"
    if [[ "$all_passed" == 1 ]]; then
        STEP_RESULTS[$last]="ok ($count flaky: failed, then passed alone)"
    fi
}

# The last lines: every step's result, the tests and targets that failed, the tests counted.
summary() {
    local failed=0 passed_tests=0 failed_tests=0 ignored_tests=0 i
    echo
    echo "== summary"
    for i in "${!STEP_NAMES[@]}"; do
        printf '%-60s %s\n' "${STEP_NAMES[$i]}" "${STEP_RESULTS[$i]}"
        [[ "${STEP_RESULTS[$i]}" == ok* ]] || failed=1
    done
    # `test a::b ... FAILED` lines, and the targets cargo names after `error: N targets failed:`
    # (a target that crashed or timed out has no failing test line).
    local failing
    local flaky=""
    [[ -f "$FLAKY_LIST" ]] && flaky="$(sort -u "$FLAKY_LIST")"
    failing="$(cat "$STEP_LOG_DIR"/*.log | grep -E '^test .* \.\.\. FAILED$' | sed -E 's/^test (.*) \.\.\. FAILED$/\1/' | sort -u)"
    if [[ -n "$flaky" ]]; then
        failing="$(comm -23 <(echo "$failing") <(echo "$flaky") | sed '/^$/d')"
        echo "flaky tests (failed beside the others, passed when rerun alone):"
        sed 's/^/    /' <<<"$flaky"
    fi
    local listed
    listed="$(printf '%s\n%s\n' "$failing" "$flaky" | sed '/^$/d')"
    if [[ -n "$failing" ]]; then
        echo "failing tests:"
        sed 's/^/    /' <<<"$failing"
    fi
    if [[ -n "$listed" ]]; then
        # Why each failed: the last lines of its captured output (the panic and its message), so
        # the summary alone says what went wrong.
        local name
        while read -r name; do
            echo "--- $name"
            cat "$STEP_LOG_DIR"/*.log \
                | awk -v want="---- $name stdout ----" '$0 == want {on=1; next} on && (/^---- .* stdout ----$/ || /^failures:$/) {on=0} on' \
                | tail -n 12 | sed 's/^/    /'
        done <<<"$listed"
    fi
    local targets
    targets="$(cat "$STEP_LOG_DIR"/*.log | awk '/^error: [0-9]+ targets? failed:/ {on=1; next} on && /^    / {print; next} {on=0}' | sort -u)"
    if [[ -n "$targets" && "$failed" == 1 ]]; then
        echo "failing test targets:"
        echo "$targets"
    fi
    # `test result: ok. 12 passed; 0 failed; 1 ignored; ...` of every test binary, added up.
    read -r passed_tests failed_tests ignored_tests < <(cat "$STEP_LOG_DIR"/*.log \
        | sed -nE 's/^test result: [A-Za-z]+\. ([0-9]+) passed; ([0-9]+) failed; ([0-9]+) ignored.*/\1 \2 \3/p' \
        | awk '{p += $1; f += $2; i += $3} END {print p + 0, f + 0, i + 0}')
    if [[ -n "$flaky" ]]; then
        # Each flaky test counted once as failed in its step; it passed on its rerun.
        local flaky_count
        flaky_count="$(wc -l <<<"$flaky")"
        failed_tests=$((failed_tests - flaky_count))
        passed_tests=$((passed_tests + flaky_count))
    fi
    rm -rf "$STEP_LOG_DIR"
    if [[ "$failed" == 0 ]]; then
        echo "result: every step passed"
    else
        echo "result: FAILED (see the steps above)"
    fi
    echo "tests: $passed_tests passed, $failed_tests failed, $ignored_tests skipped"
    return "$failed"
}

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
run_step "install helm-python-sdk (.venv-helm)" install_helm_venv

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
run_step "install cfn-lint (.venv-cfn)" install_cfn_venv

# IAM policy test (crates/karpenter/tests/it/aws_iam.rs) lints every policy `karpenter aws iam`
# prints with PyPI's parliament, in .venv-parliament/ (git-ignored). Pinned; skipped when present.
PARLIAMENT_VERSION=1.6.4
install_parliament_venv() {
  local venv=.venv-parliament
  if "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('parliament') != '$PARLIAMENT_VERSION')" 2>/dev/null; then
    return
  fi
  echo "== installing parliament $PARLIAMENT_VERSION into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "parliament==$PARLIAMENT_VERSION"
}
run_step "install parliament (.venv-parliament)" install_parliament_venv

# The Prometheus test (crates/karpenter/tests/it/prometheus.rs) runs Debian's prometheus package
# (Prometheus and promtool). Skipped when both are on PATH.
install_prometheus() {
  if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
    return
  fi
  echo "== installing Debian's prometheus package"
  local sudo=""
  [[ "$(id -u)" == 0 ]] || sudo="sudo"
  $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq prometheus >/dev/null
}
run_step "install prometheus (apt)" install_prometheus

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
        "$MOTO_VENV/bin/pip" install --quiet "moto[server]==$MOTO_VERSION" || return 1
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
    return 1
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

# --- the real Kubernetes control plane for the end-to-end tests (crates/karpenter-envtest) ---------
# Tests find etcd, kube-apiserver, kube-controller-manager and kube-scheduler through
# KUBEBUILDER_ASSETS (controller-runtime's envtest convention). When it is unset and the project's
# shared control-plane package sits beside the checkout (../shared/k8s), its unpack.sh unpacks the
# binaries once into ~/.cache/k8s-test-assets and prints their directory. Each test binary then
# starts and stops its own private instances on loopback ports. Without assets the real-cluster tests
# print "skipped: no control plane (KUBEBUILDER_ASSETS)", unless CI=true, where that fails them.
find_control_plane() {
    if [[ -n "${KUBEBUILDER_ASSETS:-}" ]]; then
        echo "== control plane: KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS"
        return
    fi
    local unpack=../shared/k8s/unpack.sh
    if [[ -x "$unpack" ]]; then
        local dir
        dir="$("$unpack")" || return 1
        export KUBEBUILDER_ASSETS="$dir"
        echo "== control plane: KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS (from $unpack)"
        return
    fi
    echo "== control plane: none (KUBEBUILDER_ASSETS unset, no $unpack); the real-cluster tests skip"
    [[ "${CI:-}" != "true" ]]
}
# Not a run_step: the variable it exports must reach the tests.
if find_control_plane; then
    STEP_NAMES+=("control plane (KUBEBUILDER_ASSETS)"); STEP_RESULTS+=("ok")
else
    STEP_NAMES+=("control plane (KUBEBUILDER_ASSETS)"); STEP_RESULTS+=("FAILED")
fi

run_step "cargo fmt --check" cargo fmt --all -- --check

# Both builds of the binary: with the aws provider (the image's) and without (the default).
run_step "cargo clippy (--features karpenter/aws)" \
    cargo clippy --workspace --all-targets --locked --features karpenter/aws -- -D warnings
run_step "cargo clippy (default features)" \
    cargo clippy --workspace --all-targets --locked -- -D warnings

# Not a run_step: the port it exports must reach the tests (run_step's pipe is a subshell).
echo "== start moto"
if start_moto; then
    STEP_NAMES+=("start moto"); STEP_RESULTS+=("ok")
else
    STEP_NAMES+=("start moto"); STEP_RESULTS+=("FAILED")
fi

run_step "cargo test (--features karpenter/aws)" \
    cargo test --workspace --locked --no-fail-fast --features karpenter/aws -- --skip real_cluster::
# The end-to-end tests on the real control plane (crates/karpenter/tests/it/real_cluster), in a step
# of their own: they mostly wait on the cluster, and run beside CPU-heavy tests their timings would
# be those of a starved machine. Four at a time, one control plane each (karpenter-envtest; an idle
# control plane and controller take a few percent of a core, a test mostly waits on its cluster).
REAL_CLUSTER_PARALLEL="${KARPENTER_ENVTEST_INSTANCES:-4}"
run_step "cargo test (real control plane: real_cluster::)" \
    env KARPENTER_ENVTEST_INSTANCES="$REAL_CLUSTER_PARALLEL" \
    cargo test --workspace --locked --no-fail-fast --features karpenter/aws --test it -- real_cluster:: --skip real_cluster::alone:: --test-threads "$REAL_CLUSTER_PARALLEL"
retry_failed_tests env KARPENTER_ENVTEST_INSTANCES=1 \
    cargo test --workspace --locked --features karpenter/aws --test it
# The real-cluster tests whose assertion is a duration (real_cluster/alone), two at a time with
# nothing else running: what they time must be the cluster's, not a machine shared with four
# control planes running upstream's heavier specs.
run_step "cargo test (real control plane, timed: real_cluster::alone::)" \
    env KARPENTER_ENVTEST_INSTANCES=2 \
    cargo test --workspace --locked --no-fail-fast --features karpenter/aws --test it -- real_cluster::alone:: --test-threads 2
retry_failed_tests env KARPENTER_ENVTEST_INSTANCES=1 \
    cargo test --workspace --locked --features karpenter/aws --test it
# The default build's own checks (tests/it/no_aws_feature.rs): the same workspace selection, so
# only the binary is rebuilt.
run_step "cargo test (default features: no_aws_feature)" \
    cargo test --workspace --locked --no-fail-fast --test it -- no_aws_feature::
# The README's `cargo run` lines as a newcomer types them, through cargo (tests/it/readme_as_typed.rs),
# last: their build of the default members replaces the binary the steps above test. The same
# selection as the step above, so nothing is rebuilt for the test binary itself.
run_step "README as typed (cargo run lines)" \
    cargo test --workspace --locked --no-fail-fast --test it -- --ignored readme_as_typed::

summary
