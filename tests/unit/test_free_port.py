"""The testbed's port picker never hands one port out twice before it is bound: etcd's client
and peer ports came out equal once in CI (1 in ~12,800 per pair), and etcd failed to start with
"bind: address already in use"."""

from __future__ import annotations

from pulumi_lora.testing.testbed._process import free_port


def test_ports_handed_out_before_any_bind_are_all_different() -> None:
    # 2,000 draws from ~12,800 ports (20000 up to the ephemeral range): without the hold, a
    # repeat is all but certain (the birthday bound: 1 - e^-156).
    ports = [free_port() for _ in range(2000)]
    assert len(set(ports)) == len(ports)
