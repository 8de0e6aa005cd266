"""NCCL all-reduce time of the messages a TP step sends: `python -m kernels.allreduce`.

One process per GPU (torch.multiprocessing.spawn, NCCL backend, NVLink multicast off:
NCCL_NVLS_ENABLE=0). For each hidden size and token count it all-reduces a bf16
[tokens, hidden] tensor (tokens x hidden x 2 bytes: the message after the attention output
projection and after the MLP down projection, twice per layer in a TP step). Each size is
timed with CUDA events around `iters` back-to-back all-reduces on rank 0 after a barrier and
warm-up, `repeats` times; the median per-all-reduce time is kept. With --calibration FILE the
result is merged into that calibration file as the top-level `allreduce_nccl` list.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
HIDDEN = {8192: ["article-70b", "llama-3-70b"], 4096: ["llama-3-8b"]}


def _worker(rank: int, world: int, port: int, tokens, hiddens, iters, repeats, out_path) -> None:
    import numpy as np
    import torch
    import torch.distributed as dist

    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    torch.cuda.set_device(rank)
    dist.init_process_group(
        "nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    results = []
    for hidden in hiddens:
        ms_list, bus = [], []
        for t in tokens:
            x = torch.randn((t, hidden), device="cuda", dtype=torch.bfloat16)
            for _ in range(5):
                dist.all_reduce(x)
            torch.cuda.synchronize()
            times = []
            for _ in range(repeats):
                dist.barrier()
                torch.cuda.synchronize()
                a = torch.cuda.Event(enable_timing=True)
                b = torch.cuda.Event(enable_timing=True)
                a.record()
                for _ in range(iters):
                    dist.all_reduce(x)
                b.record()
                torch.cuda.synchronize()
                times.append(a.elapsed_time(b) / iters)
            ms = float(np.median(times))
            nbytes = t * hidden * 2
            ms_list.append(ms)
            # Ring all-reduce bus bandwidth convention (nccl-tests): 2 (n-1)/n x bytes / time.
            bus.append(2 * (world - 1) / world * nbytes / (ms * 1e-3) / 1e9)
            if rank == 0:
                print(
                    f"  hidden {hidden} tokens {t}: {ms:.4f} ms, bus {bus[-1]:.1f} GB/s", flush=True
                )
        results.append(
            {
                "tp": world,
                "hidden": hidden,
                "dtype": "bfloat16",
                "models": HIDDEN.get(hidden, []),
                "tokens": list(tokens),
                "bytes": [t * hidden * 2 for t in tokens],
                "ms": ms_list,
                "bus_gbps": bus,
            }
        )
    if rank == 0:
        Path(out_path).write_text(json.dumps(results, indent=1))
    dist.barrier()
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="kernels.allreduce", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("allreduce.json"))
    ap.add_argument("--calibration", type=Path, default=None, help="merge into this file")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--hidden", default="8192,4096")
    args = ap.parse_args(argv)
    os.environ["NCCL_NVLS_ENABLE"] = "0"  # NVLink multicast stays off (device notes)
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")

    import torch
    import torch.multiprocessing as mp

    if torch.cuda.device_count() < args.world:
        print(f"kernels.allreduce needs {args.world} GPUs, found {torch.cuda.device_count()}")
        return 2
    from kernels.bench import environment

    hiddens = [int(h) for h in args.hidden.split(",")]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    mp.spawn(
        _worker,
        args=(args.world, 29517, TOKENS, hiddens, args.iters, args.repeats, str(args.out)),
        nprocs=args.world,
        join=True,
    )
    results = json.loads(args.out.read_text())
    env = environment()
    env["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    env["method"] = (
        f"CUDA events around {args.iters} back-to-back all-reduces on rank 0 after a barrier, "
        f"median of {args.repeats}; one process per GPU; NCCL_NVLS_ENABLE=0"
    )
    for r in results:
        r.update(env)
    args.out.write_text(json.dumps(results, indent=1))
    if args.calibration is not None:
        cal = json.loads(args.calibration.read_text())
        keep = [
            r
            for r in cal.get("allreduce_nccl", [])
            if (r["tp"], r["hidden"]) not in {(x["tp"], x["hidden"]) for x in results}
        ]
        cal["allreduce_nccl"] = keep + results
        args.calibration.write_text(json.dumps(cal, indent=1) + "\n")
        print(f"merged into {args.calibration}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
