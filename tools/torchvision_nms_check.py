#!/usr/bin/env python3
"""An independent oracle and a GPU library baseline for lesson 08's NMS: torchvision.

    build/lessons/08-postprocess/lesson08 --dump-boxes /tmp/l08_boxes.txt
    python3 tools/torchvision_nms_check.py /tmp/l08_boxes.txt [--repeats 100] [--json OUT]

The lesson binary writes the very boxes its NMS benchmark uses (benchmark_nms_boxes: 1000,
10,000 and 25,000 boxes, 80 classes, IoU 0.45) together with the indices its greedy NMS kept and
its own GPU times. This script runs, on the same boxes,
  torchvision.ops.nms            (class-agnostic)  against the lesson's "agnostic" set,
  torchvision.ops.batched_nms    (class-aware)     against the lesson's "aware" set,
checks that the kept index lists agree (as ordered lists, score descending), and times each call
with CUDA events (warm-up, then the median of --repeats), boxes already on the GPU, result left
there (what the lesson's gpu_nms rows time). Needs PyTorch and torchvision with CUDA; the course
itself does not (only this script imports torch). Exit status 0 when every set agrees.

Semantics that make the two comparable: both use corner boxes (x1, y1, x2, y2) in continuous
coordinates (no "+1"), IoU = inter / (area_a + area_b - inter) in float, and suppress when IoU
is strictly greater than the threshold. The boxes lie on a quarter-pixel grid (random_detections),
so areas and intersections are exact in float and only the division rounds. torchvision does not
promise an order for equal scores; the lesson breaks ties by lower index. A disagreement that
involves tied scores is reported as such.
"""
import argparse
import json
import statistics
import sys


def read_dump(path):
    sets, current = [], None
    with open(path) as f:
        for line in f:
            parts = line.split()
            if not parts or parts[0].startswith("#"):
                continue
            if parts[0] == "set":
                current = {"n": int(parts[1]), "iou": float(parts[2]), "boxes": [], "kept": {}}
                sets.append(current)
            elif parts[0] == "box":
                current["boxes"].append(
                    (int(parts[1]), *map(float, parts[2:7]), int(parts[7])))
            elif parts[0] == "kept":
                count = int(parts[3])
                indices = [int(v) for v in parts[4:4 + count]]
                if len(indices) != count:
                    raise ValueError(f"{path}: kept line with {len(indices)} of {count} indices")
                current["kept"][parts[1]] = {"gpu_us": float(parts[2]), "indices": indices}
            else:
                raise ValueError(f"{path}: unknown record {parts[0]!r}")
    return sets


def time_cuda_us(torch, fn, repeats):
    fn()  # warm-up: kernel loading, allocator
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e3)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dump", help="the file lesson08 --dump-boxes wrote")
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args()

    try:
        import torch
        import torchvision
        from torchvision.ops import batched_nms, nms
    except ImportError as e:
        print(f"torchvision_nms_check: needs PyTorch and torchvision ({e})", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("torchvision_nms_check: no CUDA device visible to PyTorch", file=sys.stderr)
        return 2

    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, "
          f"{torch.cuda.get_device_name(0)}")
    print("GPU time, boxes on the device, median of", args.repeats, "(CUDA events)")
    print(f"{'boxes':>6} {'NMS':<28} {'kept':>5} {'agree':>6} {'torchvision us':>15} "
          f"{'lesson us':>10}")
    ok, rows = True, []
    for s in read_dump(args.dump):
        data = torch.tensor([b[1:6] for b in s["boxes"]], dtype=torch.float32)
        index = torch.tensor([b[0] for b in s["boxes"]], dtype=torch.int64)
        classes = torch.tensor([b[6] for b in s["boxes"]], dtype=torch.int64).cuda()
        boxes, scores = data[:, :4].contiguous().cuda(), data[:, 4].contiguous().cuda()
        iou = s["iou"]
        runs = {
            "agnostic": ("torchvision.ops.nms", lambda: nms(boxes, scores, iou)),
            "aware": ("torchvision.ops.batched_nms",
                      lambda: batched_nms(boxes, scores, classes, iou)),
        }
        for mode, (name, fn) in runs.items():
            kept_tv = index[fn().cpu()].tolist()
            lesson = s["kept"][mode]
            agree = kept_tv == lesson["indices"]
            same_set = set(kept_tv) == set(lesson["indices"])
            if not agree:
                ok = False
                score_of = {b[0]: b[5] for b in s["boxes"]}
                diff = set(kept_tv) ^ set(lesson["indices"])
                scores_diff = [score_of[i] for i in diff]
                tied = len(set(score_of.values())) < len(score_of)
                print(f"  {name}, {s['n']} boxes: lists differ (same set: {same_set}); "
                      f"{len(diff)} indices in one set only; the set has tied scores: {tied}; "
                      f"first differing scores {scores_diff[:5]}")
            us = time_cuda_us(torch, fn, args.repeats)
            print(f"{s['n']:>6} {name:<28} {len(kept_tv):>5} {('yes' if agree else 'NO'):>6} "
                  f"{us:>15.1f} {lesson['gpu_us']:>10.1f}")
            rows.append({"boxes": s["n"], "nms": name, "mode": mode, "kept": len(kept_tv),
                         "agree": agree, "torchvision_gpu_us": us,
                         "lesson_gpu_us": lesson["gpu_us"]})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "torchvision": torchvision.__version__,
                       "device": torch.cuda.get_device_name(0), "rows": rows}, f, indent=1)
    print("PASS: torchvision keeps exactly the lesson's boxes" if ok
          else "FAIL: a kept set differs (see above)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
