#!/usr/bin/env python3
"""docs/benchmarks.md, the lessons' benchmark tables and the charts, from one `make bench` run.

  make bench                                   # on the GPU: writes build/bench/lessonNN.json
  tools/bench_report.py build/bench            # rewrites docs/benchmarks.md, the charts, and the
                                               # tables under each lesson's H200-BENCH marker (in
                                               # its README.md, or its RESULTS.md where the full
                                               # outputs moved: readme_insert.py looks in both)

Which benchmarks and counters each lesson shows is decided here (LESSONS), once, so the lessons'
tables and docs/benchmarks.md cannot disagree. Needs matplotlib for the charts.
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plot_bench  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# lesson: (folder, [(caption, filter regex, counters)], [(png name, filter, metric, bars, title)])
LESSONS = {
    "02": ("02-memory-types",
           [("Host-device copies at 4 KiB, 1 MiB and 256 MiB; allocation; preprocessing inputs; "
             "the transposes against cudaMemcpy", r"transfer/.*/(4096|1048576|268435456)$|transpose|alloc|preprocess",
             "GB/s,latency_us,%memcpy,%copy,bank_ways")],
           [("transfers_h200.png", r"^transfer/", "GB/s", False, "Host<->device copies (GB/s)")]),
    "03": ("03-kernels-and-warps", [("Every benchmark", "", "GB/s,%copy,%thrust,occupancy%,Gsteps/s")], []),
    "04": ("04-streams", [("Every benchmark", "", "GB/s,speedup,%ideal,us/frame,gpu_us,%streams")], []),
    "05": ("05-reduction",
           [("Every version at 2^28 floats (1 GiB)", r"BM_sum_version|BM_cub_sum/268435456|thrust", "GB/s,%cub*,%copy"),
            ("The best version (v7) and CUB by size", r"BM_cub_sum|BM_sum_best", "GB/s,latency_us,%cub*")],
           [("versions_h200.png", r"BM_sum_version|BM_cub_sum/268435456|thrust", "GB/s", True,
             "Sum of 2^28 floats (GB/s)"),
            ("sweep_h200.png", r"BM_cub_sum|BM_sum_best", "GB/s", False, "v7 and CUB by size (GB/s)")]),
    "06": ("06-affine-warp", [("Every benchmark", "", "GB/s,%copy,%unfused,latency_us,frames/s,x_cpu")], []),
    "07": ("07-gemm",
           [("Every version at 4096^3, the tensor cores, the fused epilogue", r"^all_versions|tensor|epilogue",
             "TFLOP/s,%cublas,%cublas_tf32,%peak"),
            ("The best version (v8) and cuBLAS by size", r"^sweep", "TFLOP/s,latency_us,%cublas,%peak")],
           [("versions_h200.png", r"^all_versions|tensor_cores", "TFLOP/s", False, "SGEMM 4096^3 (TFLOP/s)"),
            ("sweep_h200.png", r"^sweep", "TFLOP/s", False, "v8 and cuBLAS SGEMM by size (TFLOP/s)")]),
    "08": ("08-postprocess", [("Every benchmark", "", "latency_us,%budget,%cpu*,candidates,detections,kept")], []),
    "09": ("09-pipeline",
           [("Every configuration: BM_pipeline/workers/graphs/batch; 500 frames per iteration, "
             "host wall clock (capture to boxes), median of 3 repetitions", "", "frames_per_s,p50_ms,p99_ms")], []),
    "10": ("10-tensor-cores",
           [("Every version at 4096^3, FP16 and BF16, and the fused bias + GELU epilogue",
             r"^all_versions|^bf16|^epilogue", "TFLOP/s,%cublas*,%peak"),
            ("v4..v7, v9..v11, CUTLASS and cuBLAS by size; fully connected layers (batch 1-32 x 4096 x "
             "4096: v4..v8); 1x1 convolutions as GEMM (v4..v11)", r"^sweep|^fc|^conv1x1",
             "TFLOP/s,latency_us,%cublas*,%peak"),
            ("The tile order: v6 and v12 (v6's kernel, the order as an argument) in each order, FP16",
             r"^tile_order_", "TFLOP/s,%cublas*"),
            ("The schedule: CUTLASS's cooperative kernel and its two ping-pong kernels beside v6, FP16",
             r"^schedule_", "TFLOP/s,%cublas*")],
           [("versions_h200.png", r"^all_versions_4096/", "TFLOP/s", False,
             "FP16 GEMM 4096^3 (TFLOP/s)"),
            ("sweep_h200.png",
             r"^sweep/(cublas_fp16|cutlass_fp16|v4_pipeline|v5_wgmma|v6_wgmma_128x256|v9_cluster_multicast|v10_persistent_staged|v11_tma_store)/",
             "TFLOP/s", False, "v4..v6, v9..v11, CUTLASS and cuBLAS FP16 by size (TFLOP/s)")]),
    "12": ("12-engine",
           [("The trained YOLOv8n at 640x640: engine/<engine>/<batch>, GPU time of one inference of the "
             "batch (latency_us: end to end)", "", "us_per_image,images_per_s,TFLOP/s,latency_us")], []),
}


def run_line(context, lesson, rows=None):
    clocks = ""
    mhz = sorted({int(b["sm_MHz"]) for b in (rows or {}).values() if b.get("sm_MHz")})
    if mhz:
        clocks = " SM clock read after each benchmark: %s MHz (max %s MHz); persistence mode %s." % (
            "%d" % mhz[0] if len(mhz) == 1 else "%d-%d" % (mhz[0], mhz[-1]),
            context.get("sm_max_mhz", "?"), context.get("persistence_mode", "?"))
    flushed = [k for k, b in (rows or {}).items() if b.get("l2_flushed")]
    l2 = (" Rows with the L2 flushed before each sample: %s; the others run back to back (L2 warm "
          "unless the benchmark rotates buffers, as its caption says)." % ", ".join("`%s`" % k for k in flushed)
          if flushed else " Samples run back to back (L2 warm unless the caption says buffers rotate).")
    return ("`make bench LESSON=%s` (Google Benchmark, `--benchmark_min_time=0.05`, median of 5 "
            "repetitions) on an %s (compute capability %s), CUDA driver API %s, runtime %s, %s. "
            "`time` is GPU time: CUDA events queued behind a blocking kernel, so launch latency is "
            "not in it; rows labelled *end to end* are host call to completion, and `latency_us` is "
            "that end-to-end time beside a GPU time. Device copy ceiling in the same run: %.0f GB/s "
            "(the better of cudaMemcpy %.0f GB/s and a copy kernel %.0f GB/s; theoretical DRAM "
            "bandwidth %.0f GB/s).%s%s" % (
                lesson, context.get("device", "?"), context.get("compute_capability", "?"),
                context.get("cuda_driver_api", "?"), context.get("cuda_runtime", "?"),
                context.get("date", "?")[:10], float(context.get("d2d_copy_gbps", "nan")),
                float(context.get("memcpy_gbps", "nan")), float(context.get("copy_kernel_gbps", "nan")),
                float(context.get("dram_theoretical_gbps", "nan")), clocks, l2))


def recompute(rows, counter, baseline_of, time=lambda b: b.get("real_time"), scale=lambda name: 1.0):
    """Recompute a "% of baseline" counter as a ratio of medians: for every row that has `counter`,
    100 x time(baseline row) x scale(row) / time(row), where baseline_of(row name) names the
    baseline row (None: leave the row alone). The benchmark binaries of the 2026-12-01 run
    divided by a median of the baseline's recorded values that could mix sizes and Google
    Benchmark's trial runs; the medians in the JSON give the like-for-like figure directly."""
    for name, b in rows.items():
        if counter not in b:
            continue
        base_name = baseline_of(name)
        base = rows.get(base_name) if base_name else None
        tb, tr = (time(base), time(b)) if base else (None, None)
        if tb and tr:
            b[counter] = 100.0 * tb * scale(name) / tr


def _parts(name):
    return name.split("/")


def derive_02(rows):
    for prefix, baseline, counter in (("transpose", "memcpy_d2d", "%memcpy"),
                                      ("preprocess", "device_resident", "%device_resident")):
        recompute(rows, counter, lambda n, p=prefix, bl=baseline: "%s/%s/%s" % (p, bl, _parts(n)[2])
                  if _parts(n)[0] == p and len(_parts(n)) == 3 else None)


def derive_03(rows):
    recompute(rows, "%thrust", lambda n: "BM_thrust_transform_plus")


def derive_04(rows):
    recompute(rows, "%streams", lambda n: "BM_frame_streams", time=lambda b: b.get("us/frame"))


def derive_05(rows):
    for name, b in rows.items():
        for k in [k for k in b if k.startswith("%cub@")]:
            base = rows.get("BM_cub_sum/" + k[len("%cub@"):])
            if base:
                b[k] = 100.0 * base["real_time"] / b["real_time"]
        for k in [k for k in b if k.startswith("%cub_end_to_end@")]:
            base = rows.get("BM_cub_sum/" + k[len("%cub_end_to_end@"):])
            if base and b.get("latency_us"):
                b[k] = 100.0 * base["latency_us"] / b["latency_us"]


def derive_06(rows):
    def size(n):
        return "/".join(_parts(n)[1:3])
    recompute(rows, "%unfused", lambda n: "BM_gpu_unfused/" + size(n),
              scale=lambda n: 32.0 if "x32" in n else 1.0)
    for name, b in rows.items():
        cpu = rows.get("BM_cpu_opencv_pipeline/" + size(name))
        if "x_cpu" in b and cpu and b.get("latency_us"):
            b["x_cpu"] = cpu["real_time"] / b["latency_us"]  # both in us: CPU time / end to end


def derive_07(rows):
    def cublas_of(n):
        p = _parts(n)
        if p[0] == "sweep":
            return "sweep/cublas_sgemm/" + p[2]
        if p[0].startswith("tensor_cores_"):
            return "all_versions_" + p[0][len("tensor_cores_"):] + "/cublas_sgemm"
        return p[0] + "/cublas_sgemm"
    recompute(rows, "%cublas", cublas_of)
    recompute(rows, "%cublas_tf32", lambda n: _parts(n)[0] + "/cublas_tf32")


def derive_08(rows):
    def cpu_of(n):
        p = _parts(n)
        if p[0] == "gpu_postprocess" or p[0] == "cpu_postprocess":
            return "cpu_postprocess/" + p[1]
        if p[0] in ("gpu_nms", "cpu_nms"):
            return "cpu_nms/" + p[-1]
        return None
    for name, b in rows.items():
        for k in [k for k in b if k.startswith("%cpu_")]:
            base = rows.get(cpu_of(name) or "")
            if base:
                b[k] = 100.0 * base["real_time"] / b["real_time"]


# Per lesson: "% of baseline" counters recomputed from the medians before tables are drawn.
def derive_10(rows):
    # %cublas_fp16 / %cublas_bf16: against the cuBLAS row of the same group and size.
    def base(n, kind):
        p = _parts(n)
        if p[0] in ("sweep", "fc", "conv1x1"):
            return "%s/cublas_%s/%s" % (p[0], kind, p[2])
        return "%s/cublas_%s" % (p[0], kind)
    recompute(rows, "%cublas_fp16", lambda n: base(n, "fp16"))
    recompute(rows, "%cublas_bf16", lambda n: base(n, "bf16"))


DERIVED = {"02": derive_02, "03": derive_03, "04": derive_04, "05": derive_05, "06": derive_06,
           "07": derive_07, "08": derive_08, "10": derive_10}


def lesson_block(lesson, context, rows, chart_prefix):
    folder, tables, charts = LESSONS[lesson]
    out = [run_line(context, lesson, rows), ""]
    for caption, flt, cols in tables:
        sel = plot_bench.select(rows, flt)
        out += ["%s:" % caption, "", plot_bench.table(sel, [c for c in cols.split(",") if c]), ""]
    for png, _, _, _, title in charts:
        out += ["![%s](%s%s)" % (title, chart_prefix, png), ""]
    return "\n".join(out).rstrip("\n")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("json_dir", help="folder with lessonNN.json (make bench writes build/bench)")
    p.add_argument("--no-readmes", action="store_true",
                   help="leave the lessons' READMEs and RESULTS.md alone")
    a = p.parse_args()
    doc = ["# Benchmarks", "",
           "Every lesson's benchmark from one `make bench` run, with the library baseline and the "
           "hardware ceiling beside each figure. Regenerate everything here (tables, charts, and the "
           "tables in the lessons' READMEs or, for lessons whose figures moved there, their "
           "RESULTS.md) from your own run with:", "",
           "```bash", "make bench                        # on your GPU; writes build/bench/lessonNN.json",
           "tools/bench_report.py build/bench  # rewrites this page, the charts and the lessons' tables",
           "```", "",
           "Times are GPU time (CUDA events behind a blocking kernel: launch latency excluded, see "
           "`common/timing.hpp`) unless a row says *end to end* (host call to completion); "
           "`latency_us` is the end-to-end time beside a GPU time. "
           "Every `%<baseline>` column and `x_cpu` is a ratio of medians, computed here from the JSON (`tools/bench_report.py`): the baseline row's median time over this row's median time, at the same size. Counters: `GB/s` = 1e9 bytes per second; `%copy` = that rate over the better device "
           "copy of the same run (cudaMemcpy or a copy kernel; both count bytes read and written); `%cub`, `%cublas`, "
           "`%thrust`, `%memcpy`, `%unfused`, `%streams` = the library or simpler baseline's time over "
           "this one's (x100); `%peak` = over the FP32 peak from SM count x 128 lanes x 2 x boost "
           "clock; `%budget` = the time as a share of the lesson's target; `%cpu` = the CPU "
           "reference's time over this one's (x100).", ""]
    for lesson, (folder, _, charts) in LESSONS.items():
        path = os.path.join(a.json_dir, "lesson%s.json" % lesson)
        title = "## Lesson %s: %s" % (lesson, folder[3:].replace("-", " "))
        if not os.path.exists(path):
            doc += [title, "", "(no %s in this run)" % path, ""]
            continue
        context, rows = plot_bench.load(path)
        if lesson in DERIVED:
            DERIVED[lesson](rows)
        lesson_dir = os.path.join(ROOT, "lessons", folder)
        for png, flt, metric, bars, ctitle in charts:
            plot_bench.chart(context, plot_bench.select(rows, flt), metric, os.path.join(lesson_dir, png),
                             "%s on an %s" % (ctitle, context.get("device", "?")), bars)
        doc += [title, "", "[lesson README](../lessons/%s/README.md)" % folder, "",
                lesson_block(lesson, context, rows, "../lessons/%s/" % folder), ""]
        if not a.no_readmes:
            block = lesson_block(lesson, context, rows, "")
            subprocess.run([sys.executable, os.path.join(ROOT, "tools", "readme_insert.py"),
                            os.path.join(lesson_dir, "README.md"), "H200-BENCH: lesson%s" % lesson, "-", "--raw"],
                           input=block, text=True, check=True)
    # Lessons whose figures are their program's own tables, not a Google Benchmark: the block
    # their RESULTS.md marks for this page, copied as it stands.
    for lesson, folder in (("13", "13-quantization"),):
        with open(os.path.join(ROOT, "lessons", folder, "RESULTS.md")) as f:
            text = f.read()
        begin, end = "<!-- BENCHMARKS-PAGE: begin -->", "<!-- BENCHMARKS-PAGE: end -->"
        if begin in text and end in text:
            body = text.split(begin, 1)[1].split(end, 1)[0].strip("\n")
            doc += ["## Lesson %s: %s" % (lesson, folder[3:].replace("-", " ")), "",
                    "[lesson README](../lessons/%s/README.md)" % folder, "", body, ""]
    with open(os.path.join(ROOT, "docs", "benchmarks.md"), "w") as f:
        f.write("\n".join(doc).rstrip("\n") + "\n")
    print("wrote docs/benchmarks.md")


if __name__ == "__main__":
    main()
