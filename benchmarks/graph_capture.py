"""Which part of a training step can be captured as a CUDA graph: a diagnostic, one process per probe.

    python -m benchmarks.graph_capture [--families fno,ono,gnot] [--out ...]

Each probe warms the part up three times on a side stream, then captures it once with
``torch.cuda.graph(..., capture_error_mode="thread_local")`` and replays it, in a process of its own
(a failed capture can leave the process's CUDA random-number state unusable). Parts, each containing
the one before: ``forward`` (the loss of a batch), ``backward``, ``clip`` (global-norm clipping),
``adamw`` (torch's AdamW with ``capturable=True``, lr and betas as device tensors), ``opflow_adam``
(instead of it, :func:`opflow.optim.adam_step_on_device`, what the trainer captures); and the single operations
``cholesky_batched`` / ``cholesky_single`` (``torch.linalg.cholesky_ex`` in float64 on 9 or 1 matrices
of 16 x 16, ONO's whitening). The JSON records ``ok`` or the error with its full traceback. CUDA only.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.common import utc_timestamp, write_json_atomic

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = "benchmarks/results/graph_capture_cuda.json"
PARTS = ("forward", "backward", "clip", "adamw", "opflow_adam")
OPS = ("cholesky_batched", "cholesky_single")
TINY = {
    "fno": {"arch": "fno", "modes": 4, "width": 8, "n_layers": 2, "proj_width": 8},
    "ono": {"arch": "ono", "width": 16, "n_layers": 2, "ortho_dim": 4, "n_heads": 2, "attention": "nystrom", "num_landmarks": 8},
    "gnot": {"arch": "gnot", "width": 16, "n_layers": 1, "n_heads": 2, "n_experts": 2},
    "gt": {"arch": "gt", "width": 16, "n_layers": 1, "n_heads": 2, "ffn_dim": 16, "modes": 4, "decoder_width": 8, "proj_width": 8},
}
#: opflow bench: CUDA only
BENCH_GPU_ARGS: list[str] = []


def probe(family: str, part: str, device: str = "cuda") -> dict[str, Any]:
    """Run one probe in this process (the child's side); on a CPU (``--smoke``) the part runs without a capture."""
    import torch

    dev = torch.device(device)
    try:
        if part in OPS:
            c = torch.eye(16, dtype=torch.float64, device=dev) * 2
            x = c.expand(9, 16, 16).clone() if part == "cholesky_batched" else c.clone()

            def body() -> Any:
                return torch.linalg.cholesky_ex(x)
        else:
            from opflow.hostsync import deferred_checks
            from opflow.models import build_model
            from opflow.optim import adam_step_on_device

            torch.manual_seed(0)
            m = build_model(TINY[family], 1, 1, 2).to(dev)
            B, s = 4, 16
            xs = torch.linspace(0, 1, s, device=dev)
            coords = torch.stack(torch.meshgrid(xs, xs, indexing="ij"), -1).reshape(1, -1, 2).expand(B, -1, -1).contiguous()
            inputs = torch.randn(B, s * s, 1, device=dev)
            target = torch.randn(B, s * s, 1, device=dev)
            b = {"coords": coords, "inputs": inputs, "target": target}
            opt = torch.optim.AdamW(m.parameters(), lr=1e-3, capturable=dev.type == "cuda")
            lr_t = torch.tensor(1e-3, device=dev)
            b1, b2 = torch.tensor(0.9, device=dev), torch.tensor(0.999, device=dev)
            if part == "adamw":
                opt.param_groups[0]["lr"], opt.param_groups[0]["betas"] = lr_t, (b1, b2)
            hyper = [(opt.param_groups[0], lr_t, b1, b2)]
            k = PARTS.index(part)

            def body() -> Any:
                with deferred_checks():
                    out = m(b["coords"], b["inputs"], grid_shape=(s, s))
                    loss = ((out - b["target"]) ** 2).mean()
                    if k >= 1:
                        loss.backward()
                    if k >= 2:
                        torch.nn.utils.clip_grad_norm_(m.parameters(), 0.1)
                    if part == "adamw":
                        opt.step()
                    elif part == "opflow_adam":
                        adam_step_on_device(opt, hyper)
                    return loss.detach()

        if dev.type != "cuda":  # --smoke: the code path only
            for _ in range(2):
                if part not in OPS:
                    opt.zero_grad(set_to_none=True)
                body()
            return {"ok": True, "note": "run without a capture (no CUDA)"}
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                if part not in OPS:
                    opt.zero_grad(set_to_none=True)
                body()
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        if part not in OPS:
            opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(g, capture_error_mode="thread_local"):
            body()
        g.replay()
        torch.cuda.synchronize()
        return {"ok": True}
    except Exception as e:  # noqa: BLE001 - the diagnostic's result
        tb = traceback.format_exc().replace(str(ROOT) + "/", "")  # repository-relative paths, no machine's folders
        for site in {str(Path(torch.__file__).parents[1]) + "/"}:
            tb = tb.replace(site, "<site-packages>/")
        return {"ok": False, "error": f"{type(e).__name__}: {e}", "traceback": tb}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--families", default="fno,ono,gnot,gt")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--child", nargs=2, metavar=("FAMILY", "PART"), help=argparse.SUPPRESS)
    ap.add_argument("--smoke", action="store_true", help="on the CPU, in this process: each part of fno once, without a capture (checks the code paths)")
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(probe(*a.child)))
        return 0
    import torch

    if a.smoke:
        out = a.out or ROOT / "benchmarks/results/smoke/graph_capture.json"
        probes = {f"fno {p}": probe("fno", p, "cpu") for p in PARTS}
        write_json_atomic(out, {"benchmark": "graph_capture", "smoke": True, "created": utc_timestamp(), "device_name": "cpu",
                                "torch": torch.__version__, "probes": probes})
        bad = [k for k, r in probes.items() if not r["ok"]]
        print(f"wrote {out}" + (f"; failed: {bad}" if bad else ""))
        return 1 if bad else 0
    if not torch.cuda.is_available():
        ap.error("CUDA graphs need a CUDA device")
    fams = [f for f in a.families.split(",") if f]
    jobs = [(f, p) for f in fams for p in PARTS] + [("-", op) for op in OPS]

    def run(job: tuple[str, str]) -> tuple[tuple[str, str], dict[str, Any]]:
        r = subprocess.run([sys.executable, "-m", "benchmarks.graph_capture", "--child", *job], capture_output=True, text=True, cwd=ROOT, timeout=300)
        try:
            return job, json.loads(r.stdout.strip().splitlines()[-1])
        except Exception:  # noqa: BLE001
            return job, {"ok": False, "error": f"the probe process failed (exit {r.returncode})", "traceback": r.stderr[-4000:]}

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = dict(pool.map(run, jobs))
    out = a.out or ROOT / DEFAULT_OUT
    doc = {"benchmark": "graph_capture", "created": utc_timestamp(), "device_name": torch.cuda.get_device_name(),
           "torch": torch.__version__, "probes": {f"{f} {p}": r for (f, p), r in results.items()}}
    write_json_atomic(out, doc)
    for k, r in doc["probes"].items():
        print(f"{k:24s} {'ok' if r['ok'] else r['error'][:200]}")
    return 0


def summarize(result: dict[str, Any]) -> list[str]:
    """``SUMMARY.md`` lines: each probe, ok or its error's first line."""
    lines = [f"- {result.get('device_name')}, torch {result.get('torch')}"]
    for k, r in result.get("probes", {}).items():
        lines.append(f"- {k}: {'captured and replayed' if r.get('ok') else r.get('error', '').splitlines()[0][:160]}")
    return lines


if __name__ == "__main__":
    sys.exit(main())
