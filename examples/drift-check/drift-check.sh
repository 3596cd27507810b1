#!/usr/bin/env bash
# A CI drift check against an EKS cluster (docs/managed-clusters.md): the kubeconfig from the
# runner's cloud identity, the stack's virtualenv, then a refreshing preview that fails on drift
# and names each drifted adapter in words. Copy it next to your stack (infra/ below) and run it
# from a job that has cloud credentials (OIDC) and the pulumi CLI on PATH.
#   CLUSTER   the EKS cluster's name (required)
#   STACK     the stack to check (default: prod)
#   INFRA     the Pulumi project folder (default: infra)
set -euo pipefail
: "${CLUSTER:?set CLUSTER to the name of the EKS cluster}"
STACK="${STACK:-prod}"
INFRA="${INFRA:-infra}"
RUNNER_TEMP="${RUNNER_TEMP:-$(mktemp -d)}"

aws eks update-kubeconfig --name "$CLUSTER" --kubeconfig "$RUNNER_TEMP/kubeconfig"
export KUBECONFIG="$RUNNER_TEMP/kubeconfig"

cd "$INFRA"
# The virtualenv Pulumi.yaml names (runtime.options.virtualenv: venv); one restored by a cache
# step is used as it is.
if [ ! -x venv/bin/python ]; then
  python3 -m venv venv
  venv/bin/pip install -r requirements.txt  # pulumi-lora by path or wheel: not on PyPI yet
fi
export VIRTUAL_ENV="$PWD/venv" PATH="$PWD/venv/bin:$PATH"

pulumi stack select "$STACK"
pulumi preview --refresh --expect-no-changes --diff
