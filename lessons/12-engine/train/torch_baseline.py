#!/usr/bin/env python3
"""PyTorch baselines for lesson 12's engine: the same YOLOv8n, the same weights file, timed on
the GPU at 640 x 640 for batch 1 and batch 32.

  python3 torch_baseline.py RESULT.json [--weights yolov8n_scenes.weights]

Rows: eager FP32; eager FP16 channels_last (cuDNN, cudnn.benchmark on); torch.compile default
FP16 channels_last; torch.compile mode="reduce-overhead" FP16 channels_last (CUDA graphs).
Timing: warm-up, then 7 windows of 50 back-to-back calls between two CUDA events; the median
window / 50 is the time per call (the GPU's time for a stream of calls, launch overhead
included where the GPU waits for it). One line per row; JSON to argv[1].
"""
import argparse
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as yolo  # noqa: E402

WINDOWS, CALLS = 7, 50


def time_calls(fn, x, warmup=20):
    with torch.no_grad():
        for _ in range(warmup):
            fn(x)
        torch.cuda.synchronize()
        times = []
        for _ in range(WINDOWS):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(CALLS):
                fn(x)
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop) / CALLS)
    return statistics.median(times), min(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("result", help="JSON output path")
    ap.add_argument("--weights", default="yolov8n_scenes.weights")
    ap.add_argument("--batches", default="1,32")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("torch_baseline.py needs a CUDA GPU")
    dev = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    base = yolo.load_weights(yolo.YOLOv8n(), args.weights).eval()
    gpu = torch.cuda.get_device_name(dev)
    print(f"torch {torch.__version__}, {gpu}, weights {args.weights}", flush=True)

    def eager_fp32():
        m = yolo.YOLOv8n().eval()
        m.load_state_dict(base.state_dict())
        return m.to(dev), torch.float32, torch.contiguous_format

    def eager_fp16():
        m = yolo.YOLOv8n().eval()
        m.load_state_dict(base.state_dict())
        return m.to(dev).half().to(memory_format=torch.channels_last), torch.float16, torch.channels_last

    def compiled(mode):
        def make():
            m, dtype, fmt = eager_fp16()
            return torch.compile(m, mode=mode), dtype, fmt
        return make

    rows = [("eager fp32", eager_fp32), ("eager fp16 channels_last", eager_fp16),
            ("torch.compile fp16", compiled("default")),
            ("torch.compile reduce-overhead fp16", compiled("reduce-overhead"))]
    results = []
    for name, make in rows:
        try:
            m, dtype, fmt = make()
        except Exception as e:
            print(f"{name:36s} FAILED to build: {e}", flush=True)
            results.append({"name": name, "error": str(e)})
            continue
        for b in [int(v) for v in args.batches.split(",")]:
            x = torch.rand(b, 3, 640, 640, device=dev).to(dtype).contiguous(memory_format=fmt)
            try:
                med, best = time_calls(m, x)
            except Exception as e:
                print(f"{name:36s} batch {b:3d}  FAILED: {e}", flush=True)
                results.append({"name": name, "batch": b, "error": str(e)})
                continue
            ips = b * 1000.0 / med
            print(f"{name:36s} batch {b:3d}  {med:8.3f} ms/call (best window {best:.3f})  "
                  f"{ips:9.1f} img/s", flush=True)
            results.append({"name": name, "batch": b, "ms_per_call_median": med,
                            "ms_per_call_best_window": best, "images_per_s": ips})
        del m
        torch.cuda.empty_cache()
    with open(args.result, "w") as f:
        json.dump({"gpu": gpu, "torch": torch.__version__, "cuda": torch.version.cuda,
                   "input": [3, 640, 640], "windows": WINDOWS, "calls_per_window": CALLS,
                   "rows": results}, f, indent=2)


if __name__ == "__main__":
    main()
