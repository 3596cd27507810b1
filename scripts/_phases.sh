# Shared by the scripts: run a named phase, print how long it took, summarise at the end.
_phase_log=()
phase() {
  local name=$1; shift
  local start=$SECONDS
  echo "==> $name" >&2
  if "$@"; then
    _phase_log+=("$(printf '%6ss  %s' $((SECONDS - start)) "$name")")
    echo "<== $name: $((SECONDS - start))s" >&2
  else
    local rc=$?
    echo "<== $name: FAILED (exit $rc) after $((SECONDS - start))s" >&2
    _phase_log+=("$(printf '%6ss  %s (FAILED)' $((SECONDS - start)) "$name")")
    phase_summary
    exit $rc
  fi
}
phase_summary() {
  echo "== phase timings ==" >&2
  printf '%s\n' "${_phase_log[@]}" >&2
}
