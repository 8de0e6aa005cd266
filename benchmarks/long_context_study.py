"""The long-context study's table: long requests vs the others, network bytes and links, per arm.

    kvsched run --config studies/long_context.yaml --out runs/long_context
    python -m benchmarks.long_context_study runs/long_context

Reads only the run directory (requests.csv per arm, summary.json). "xlong" = the workload's
128K-token requests; "others" = everything else. TPOT = (finish - first token) / (outputs - 1).
transfer/wire = step time spent waiting for remote pages over the bandwidth bound of the same
bytes (1.0 = at the bound); msg share = the part of that time spent on per-message costs
(round trips, kernel per-message CPU, work-request posts, the index handshake). "xlong wait per
token" = per decode step of a finished placed request, the step's wait for remote pages and the
bandwidth bound of the same bytes.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from sim.rundir import arm_dir_name


def _pct(x: pd.Series, q: float) -> float:
    return float(np.percentile(x, q)) if len(x) else float("nan")


def class_stats(df: pd.DataFrame) -> dict:
    done = df[df.status == "finished"]
    ttft = (done.first_token_s - done.arrival_s) * 1e3
    dec = done[done.output_tokens > 1]
    tpot = (dec.finish_s - dec.first_token_s) * 1e3 / (dec.output_tokens - 1)
    return {
        "n": len(df),
        "done": len(done),
        "failed": int((df.status == "failed").sum()),
        "ttft_p50": _pct(ttft, 50),
        "ttft_p99": _pct(ttft, 99),
        "tpot_p50": _pct(tpot, 50),
        "tpot_p99": _pct(tpot, 99),
    }


def arm_row(run: Path, arm: str, m: dict) -> dict:
    df = pd.read_csv(run / arm_dir_name(arm) / "requests.csv")
    long = df.tag.str.startswith("xlong")
    transfer, wire = m.get("network_transfer_s", 0.0), m.get("network_wire_s", 0.0)
    per_msg = m.get("network_message_s", 0.0) + m.get("network_handshake_s", 0.0)
    return {
        "arm": arm,
        "long": class_stats(df[long]),
        "others": class_stats(df[~long]),
        "out_tok_s": m["output_throughput"],
        "preempt": m["preemptions"],
        "net_gb": m.get("network_bytes", 0.0) / 1e9,
        "util_mean": m.get("link_utilization_mean", 0.0),
        "util_max": m.get("link_utilization_max", 0.0),
        "transfer_over_wire": transfer / wire if wire else float("nan"),
        "msg_share": per_msg / transfer if transfer else float("nan"),
        "tok_transfer_ms": m.get("remote_decode_transfer_ms") or float("nan"),
        "tok_wire_ms": m.get("remote_decode_wire_ms") or float("nan"),
    }


def fmt(v: float, spec: str = ".0f") -> str:
    return "-" if v != v else format(v, spec)


def step_table(config: Path) -> None:
    """One decode step of one 128K-token request, priced by sim/network.py on an idle network."""
    from sim.config import load_config_file, parse_config
    from sim.xnode.network import Network

    raw = {k: v for k, v in load_config_file(config).items() if k != "arms"}
    print(
        "\n| placement | remote pages | mode | transfer ms | bandwidth bound ms | x bound | "
        "per-message ms | per-byte ms | index bytes |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for label, layout in (("spill (1 peer)", "spill"), ("shard (3 peers)", "shard")):
        for mode in ("naive", "batched_async", "rdma"):
            cfg = parse_config({**raw, "network": {**raw.get("network", {}), "mode": mode}})
            lanes = min(cfg.node.tp, cfg.network.nics_per_node or cfg.node.num_gpus)
            net = Network(
                cfg.network,
                cfg.cluster.num_nodes,
                lanes,
                cfg.cache.page_size,
                cfg.model.kv_bytes_per_token,
                cfg.model.num_layers,
            )
            pages = 131072 // cfg.cache.page_size
            reads = _remote_reads(layout, pages, cfg.cache.page_size, cfg.placement.stripe_pages)
            c = net.price(reads, {})
            total = c.handshake_s + c.data_s
            n_remote = sum(len(p) for p, _ in reads.values())
            print(
                f"| {label} | {n_remote:,} of {pages:,} | {mode} | {total * 1e3:.0f} | {c.wire_s * 1e3:.0f} | "
                f"{total / c.wire_s:.2f} | {(c.message_s + c.handshake_s) * 1e3:.0f} | {c.byte_s * 1e3:.0f} | "
                f"{c.index_bytes:,} |"
            )


def _remote_reads(layout: str, pages: int, page_size: int, stripe: int) -> dict:
    """spill: the last half of the context on one peer, contiguous; shard: stripes over 4 nodes."""
    if layout == "spill":
        ids = np.arange(pages // 2)
        return {1: (ids, len(ids) * page_size)}
    member = (np.arange(pages) // stripe) % 4
    out = {}
    for peer in (1, 2, 3):
        ids = np.arange(int((member == peer).sum()))
        out[peer] = (ids, len(ids) * page_size)
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", type=Path)
    p.add_argument(
        "--config",
        type=Path,
        default=Path("studies/long_context.yaml"),
        help="the study config, for the one-step pricing table",
    )
    args = p.parse_args(argv)
    summary = json.loads((args.run / "summary.json").read_text())
    rows = [arm_row(args.run, arm, m) for arm, m in summary["arms"].items()]
    print(
        "| arm | xlong done/failed/all | xlong TTFT p50 s | xlong TPOT p50 ms | others TTFT p50 / p99 s | "
        "others TPOT p50 / p99 ms | out tok/s | preempt | network GB | link util mean / max | "
        "transfer/wire | msg share | xlong wait per token / bound ms |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        lg, ot = r["long"], r["others"]
        print(
            f"| {r['arm']} | {lg['done']}/{lg['failed']}/{lg['n']} | {fmt(lg['ttft_p50'] / 1e3, '.1f')} | "
            f"{fmt(lg['tpot_p50'])} | {fmt(ot['ttft_p50'] / 1e3, '.1f')} / {fmt(ot['ttft_p99'] / 1e3, '.1f')} | "
            f"{fmt(ot['tpot_p50'])} / {fmt(ot['tpot_p99'])} | {r['out_tok_s']:.0f} | {r['preempt']} | "
            f"{r['net_gb']:.0f} | {r['util_mean']:.1%} / {r['util_max']:.1%} | "
            f"{fmt(r['transfer_over_wire'], '.2f')} | {fmt(r['msg_share'], '.0%')} | "
            f"{fmt(r['tok_transfer_ms'])} / {fmt(r['tok_wire_ms'])} |"
        )
    step_table(args.config)


if __name__ == "__main__":
    main()
