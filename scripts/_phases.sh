# Shared by the scripts: run a named phase, print how long it took, summarise at the end.
# `budget SECONDS` before a phase states its time budget: the summary says whether it was met
# (a report, not a failure: time on a shared machine is no test result).
_phase_log=()
_phase_budget=""
budget() { _phase_budget=$1; }
phase() {
  local name=$1; shift
  local start=$SECONDS limit=$_phase_budget verdict=""
  _phase_budget=""
  echo "==> $name" >&2
  if "$@"; then
    local took=$((SECONDS - start))
    if [ -n "$limit" ]; then
      if [ "$took" -le "$limit" ]; then verdict=" (budget ${limit}s: met)"; else verdict=" (budget ${limit}s: OVER)"; fi
    fi
    _phase_log+=("$(printf '%6ss  %s%s' "$took" "$name" "$verdict")")
    echo "<== $name: ${took}s$verdict" >&2
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
