#!/usr/bin/env python3
"""Trains lesson 12's detector (YOLOv8n, 6 colour classes) on scenes from the C++ generator and
writes everything the C++ side needs.

  python3 train_detector.py --scenes-lib build/lessons/12-engine/liblesson12_scenes.so --out OUT

Data: every training image is a fresh scene, seed 1_000_000 + seed * 10^8 + step * batch + i,
rendered by liblesson12_scenes.so (scenes.cpp) through ctypes on a pool of threads.
Held-out: scenes 0 .. eval_frames - 1 at 640 x 640.

Loss (YOLOv8's recipe, written for this course): a task-aligned assigner (TOOD, Feng et al.
2021: metric = score^1.0 * CIoU^6.0, top 10 anchors per object among those whose centre is
inside it, an anchor claimed twice goes to the higher IoU), CIoU box loss, distribution focal
loss (GFL, Li et al. 2020) on the 16-bin side distributions, BCE class loss against
IoU-aware soft targets; weights box 7.5, cls 0.5, dfl 1.5. AdamW, linear warm-up, cosine
decay, bf16 autocast on CUDA, EMA of the weights.

The schedule runs to --steps or --train-seconds, whichever comes first (progress = the larger
of the two fractions), so the run fits its time budget on any GPU; metrics.json records the
steps actually taken.

Outputs (in --out):
  yolov8n_scenes.weights  the lesson's weights file (format in model.py / network.hpp); the
                          model is then LOADED BACK from it, so every number below comes from
                          exactly the stored (f16-rounded) values
  golden.bin              reference outputs for the C++ CPU reference and the GPU engine:
                            course-detector-golden 1
                            case NAME SEED HEIGHT WIDTH OUT_ROWS OUT_COLS OFFSET   (one per case)
                            data BYTES
                          then exactly one '\\n' and BYTES of raw little-endian float32; case k's
                          output, [OUT_ROWS = 4 + C][OUT_COLS = N] row-major, starts OFFSET bytes
                          into the data (64-aligned). The input is not stored: render scene SEED
                          at WIDTH x HEIGHT with render_scene, then x[c][y][x] =
                          float(rgb[y][x][c]) / 255.0f (a float division, RGB planes). The output
                          is the eval model's forward in float64 on the CPU (the input converted
                          to float32 first, then to float64), rounded to float32; metrics.json
                          gives the largest |float32 forward - float64 forward| per case.
                          Cases: scene0 (seed 0, 640x640), scene1 (seed 1, 640x640),
                          small96x128 (seed 2, H 96, W 128), small64 (seed 3, 64x64).
  yolov8n_scenes.onnx     opset 17, input "images" [B, 3, 640, 640] (dynamic B), output "output0"
                          [B, 10, 8400]; skipped with a message if the exporter is unavailable
  metrics.json            mAP@0.5, mAP@0.5:0.95 (COCO-style: per class, 101-point interpolated
                          precision, mean over classes; greedy matching by score; NMS IoU 0.7,
                          score >= 0.001, at most 300 detections per image), per-class AP,
                          training time, command, seed, versions, GPU
"""
import argparse
import ctypes
import json
import math
import os
import platform
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as yolo  # noqa: E402

TRAIN_SEED_BASE = 1_000_000
MAX_BOXES = 64
GOLDEN_CASES = [("scene0", 0, 640, 640), ("scene1", 1, 640, 640), ("small96x128", 2, 96, 128),
                ("small64", 3, 64, 64)]


def log(msg):
    print(msg, flush=True)


# ----------------------------------------------------------------------------------- scenes

_LIB = None


def scenes_lib(path):
    global _LIB
    if _LIB is None:
        lib = ctypes.CDLL(path)
        lib.lesson12_render_scene.argtypes = [ctypes.c_uint64, ctypes.c_int, ctypes.c_int,
                                              ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
        lib.lesson12_render_scene.restype = ctypes.c_int
        _LIB = lib
    return _LIB


def render(lib_path, seed, height, width):
    """-> (rgb uint8 [H, W, 3], boxes float32 [n, 5] rows class, x1, y1, x2, y2)."""
    rgb = np.empty((height, width, 3), np.uint8)
    boxes = np.empty((MAX_BOXES, 5), np.float32)
    n = scenes_lib(lib_path).lesson12_render_scene(seed, width, height, rgb.ctypes.data,
                                                   boxes.ctypes.data, MAX_BOXES)
    if n < 0:
        raise RuntimeError(f"lesson12_render_scene(seed {seed}, {width}x{height}) returned {n}")
    return rgb, boxes[:n].copy()


def to_input(rgb):
    """uint8 [H, W, 3] RGB -> float32 [3, H, W], x / 255 (IEEE division, as the C++ side does)."""
    return np.ascontiguousarray(rgb.transpose(2, 0, 1)).astype(np.float32) / np.float32(255.0)


class ScenePrefetcher:
    """Renders batches of scenes on a pool of threads, ahead of the consumer, straight into a
    ring of (pinned, on CUDA) host buffers, and copies each to the device asynchronously.

    Batch k holds scenes seed_fn(k, 0 .. batch-1). Iterating yields (uint8 [B, H, W, 3] on
    device, boxes [B, MAX_BOXES, 5] float32 on the CPU (class -1 = padding), counts [B]).
    Threads, not processes: ctypes drops the GIL for the C call, so the renderer runs on all
    cores with no inter-process copies and no dependence on /dev/shm's size."""

    def __init__(self, lib_path, seed_fn, num_batches, batch, size, threads, device, depth=None):
        from concurrent.futures import ThreadPoolExecutor
        self.lib_path, self.seed_fn, self.n, self.batch, self.size = lib_path, seed_fn, num_batches, batch, size
        self.device = device
        self.threads = max(1, threads)
        self.depth = depth or max(2, 2 * self.threads)
        self.ring = self.depth + 3  # a buffer is rewritten >= 3 batches after its copy was issued
        pin = device.type == "cuda"
        self.imgs = [torch.empty((batch, size, size, 3), dtype=torch.uint8, pin_memory=pin) for _ in range(self.ring)]
        self.copied = [None] * self.ring  # CUDA event of each buffer's last host-to-device copy
        self.pool = ThreadPoolExecutor(self.threads)
        scenes_lib(lib_path)  # load once, before the threads

    def _render(self, k):
        slot = k % self.ring
        if self.copied[slot] is not None:
            self.copied[slot].synchronize()
        imgs = self.imgs[slot].numpy()
        boxes = np.full((self.batch, MAX_BOXES, 5), -1.0, np.float32)
        counts = np.zeros(self.batch, np.int64)
        fn = scenes_lib(self.lib_path).lesson12_render_scene
        for i in range(self.batch):
            n = fn(self.seed_fn(k, i), self.size, self.size, imgs[i].ctypes.data, boxes[i].ctypes.data, MAX_BOXES)
            if n < 0:
                raise RuntimeError(f"lesson12_render_scene(seed {self.seed_fn(k, i)}) returned {n}")
            boxes[i, n:] = -1.0
            counts[i] = n
        return slot, torch.from_numpy(boxes), torch.from_numpy(counts)

    def __iter__(self):
        from collections import deque
        pending = deque()
        try:
            for k in range(min(self.depth, self.n)):
                pending.append(self.pool.submit(self._render, k))
            next_k = len(pending)
            while pending:
                slot, boxes, counts = pending.popleft().result()
                x = self.imgs[slot].to(self.device, non_blocking=True)
                if self.device.type == "cuda":
                    ev = torch.cuda.Event()
                    ev.record()
                    self.copied[slot] = ev
                if next_k < self.n:
                    pending.append(self.pool.submit(self._render, next_k))
                    next_k += 1
                yield x, boxes, counts
        finally:
            for f in pending:
                f.cancel()
            self.pool.shutdown(wait=True)


def images_to_float(imgs):
    """uint8 [B, H, W, 3] -> float [B, 3, H, W] / 255 on the same device (channels_last
    strides: the permuted NHWC tensor already is channels_last)."""
    return imgs.permute(0, 3, 1, 2).float().div_(255.0)


# -------------------------------------------------------------------------------------- loss

def bbox_ciou(b1, b2, eps=1e-7):
    """CIoU of xyxy boxes b1, b2 (broadcast) (Zheng et al. 2020): IoU - centre distance^2 /
    enclosing diagonal^2 - alpha v, v = (4 / pi^2)(atan(w2/h2) - atan(w1/h1))^2."""
    x1, y1, x2, y2 = b1.unbind(-1)
    X1, Y1, X2, Y2 = b2.unbind(-1)
    w1, h1 = x2 - x1, (y2 - y1).clamp_min(eps)
    w2, h2 = X2 - X1, (Y2 - Y1).clamp_min(eps)
    inter = (torch.minimum(x2, X2) - torch.maximum(x1, X1)).clamp_min(0) * \
            (torch.minimum(y2, Y2) - torch.maximum(y1, Y1)).clamp_min(0)
    union = w1 * h1 + w2 * h2 - inter + eps
    iou = inter / union
    cw = torch.maximum(x2, X2) - torch.minimum(x1, X1)
    ch = torch.maximum(y2, Y2) - torch.minimum(y1, Y1)
    c2 = cw ** 2 + ch ** 2 + eps
    rho2 = ((X1 + X2 - x1 - x2) ** 2 + (Y1 + Y2 - y1 - y2) ** 2) / 4
    v = (4 / math.pi ** 2) * (torch.atan(w2 / h2) - torch.atan(w1 / h1)) ** 2
    with torch.no_grad():
        alpha = v / (v - iou + (1 + eps))
    return iou - (rho2 / c2 + v * alpha)


@torch.no_grad()
def task_aligned_assign(pd_scores, pd_bboxes, anchors, gt_labels, gt_bboxes, mask_gt,
                        topk=10, alpha=1.0, beta=6.0, eps=1e-9):
    """TOOD's task-aligned assignment, batched.
    pd_scores [B, N, C] (probabilities), pd_bboxes [B, N, 4] xyxy, anchors [N, 2] (same units),
    gt_labels [B, M] long, gt_bboxes [B, M, 4] xyxy, mask_gt [B, M] bool.
    -> target_bboxes [B, N, 4], target_scores [B, N, C], fg_mask [B, N] bool."""
    B, N, C = pd_scores.shape
    M = gt_bboxes.shape[1]
    # Anchor centres strictly inside each object.
    lt = anchors[None, None] - gt_bboxes[:, :, None, :2]
    rb = gt_bboxes[:, :, None, 2:] - anchors[None, None]
    in_gts = torch.cat((lt, rb), -1).amin(-1) > eps  # [B, M, N]
    valid = in_gts & mask_gt[:, :, None]
    ious = bbox_ciou(gt_bboxes[:, :, None, :], pd_bboxes[:, None, :, :]).clamp_min(0)
    ious = torch.where(valid, ious, torch.zeros_like(ious))
    scores = pd_scores.transpose(1, 2).gather(1, gt_labels.clamp_min(0)[:, :, None].expand(B, M, N))
    scores = torch.where(valid, scores, torch.zeros_like(scores))
    align = scores.pow(alpha) * ious.pow(beta)  # [B, M, N]
    top_idx = align.topk(min(topk, N), dim=-1).indices  # [B, M, k]
    mask_topk = torch.zeros_like(align, dtype=torch.bool).scatter_(-1, top_idx, True)
    mask_pos = mask_topk & valid
    # An anchor in the top-k of several objects goes to the one it overlaps most.
    multi = mask_pos.sum(1, keepdim=True) > 1  # [B, 1, N]
    if multi.any():
        best = F.one_hot(ious.argmax(1), M).permute(0, 2, 1).bool()  # [B, M, N]
        mask_pos = torch.where(multi.expand(-1, M, -1), best & valid, mask_pos)
    fg_mask = mask_pos.any(1)  # [B, N]
    gt_idx = mask_pos.float().argmax(1)  # [B, N]
    batch_idx = torch.arange(B, device=gt_idx.device)[:, None]
    target_labels = gt_labels[batch_idx, gt_idx].clamp_min(0)  # [B, N]
    target_bboxes = gt_bboxes[batch_idx, gt_idx]  # [B, N, 4]
    # Soft class targets: the alignment metric, rescaled per object so that its best anchor
    # gets that anchor's IoU.
    align = align * mask_pos
    pos_align = align.amax(-1, keepdim=True)
    pos_ious = (ious * mask_pos).amax(-1, keepdim=True)
    norm = (align * pos_ious / (pos_align + eps)).amax(1)  # [B, N]
    target_scores = F.one_hot(target_labels, C).float() * (norm * fg_mask)[..., None]
    return target_bboxes, target_scores, fg_mask


class DetectionLoss:
    def __init__(self, nc, box_gain=7.5, cls_gain=0.5, dfl_gain=1.5):
        self.nc, self.box_gain, self.cls_gain, self.dfl_gain = nc, box_gain, cls_gain, dfl_gain

    def __call__(self, outs, gt):
        """outs: the three [B, 64 + C, h, w] training outputs; gt: [B, M, 5] (class, xyxy pixels;
        class -1 = padding). -> (total loss, tensor [box, cls, dfl])."""
        B = outs[0].shape[0]
        R = yolo.REG_MAX
        shapes = [o.shape[2:] for o in outs]
        x = torch.cat([o.float().reshape(B, 4 * R + self.nc, -1) for o in outs], 2).transpose(1, 2)
        pred_dist, pred_logits = x[..., :4 * R], x[..., 4 * R:]  # [B, N, 64], [B, N, C]
        anchors, strides = yolo.make_anchors(shapes, x.device, torch.float32)  # grid cells
        dist = yolo.dfl_expectation(pred_dist)
        pred_boxes = torch.cat((anchors - dist[..., :2], anchors + dist[..., 2:]), -1)  # grid cells

        gt_labels = gt[..., 0].long()
        mask_gt = gt_labels >= 0
        target_bboxes, target_scores, fg = task_aligned_assign(
            pred_logits.detach().sigmoid(), pred_boxes.detach() * strides, anchors * strides,
            gt_labels, gt[..., 1:5], mask_gt)
        target_bboxes = target_bboxes / strides  # grid cells
        tss = target_scores.sum().clamp_min(1.0)

        loss_cls = F.binary_cross_entropy_with_logits(pred_logits, target_scores, reduction="sum") / tss
        if fg.any():
            weight = target_scores.sum(-1)[fg]  # [P]
            iou = bbox_ciou(pred_boxes[fg], target_bboxes[fg])
            loss_box = ((1.0 - iou) * weight).sum() / tss
            anc = anchors[None].expand(B, -1, -1)[fg]
            t = target_bboxes[fg]
            ltrb = torch.cat((anc - t[:, :2], t[:, 2:] - anc), -1).clamp(0, R - 1 - 0.01)  # [P, 4]
            left = ltrb.long()
            w_right = ltrb - left
            logits = pred_dist[fg].reshape(-1, R)
            ce_l = F.cross_entropy(logits, left.reshape(-1), reduction="none")
            ce_r = F.cross_entropy(logits, (left + 1).reshape(-1), reduction="none")
            dfl = (ce_l * (1 - w_right.reshape(-1)) + ce_r * w_right.reshape(-1)).reshape(-1, 4).mean(-1)
            loss_dfl = (dfl * weight).sum() / tss
        else:
            loss_box = loss_dfl = pred_dist.sum() * 0.0
        parts = torch.stack((loss_box, loss_cls, loss_dfl)).detach()
        return self.box_gain * loss_box + self.cls_gain * loss_cls + self.dfl_gain * loss_dfl, parts


class EMA:
    """Exponential moving average of the weights and BN statistics; the decay ramps up from 0
    (d = decay * (1 - exp(-updates / tau))) so early, poor weights fade quickly."""

    def __init__(self, model, decay, tau):
        import copy
        self.model = copy.deepcopy(model).eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.decay, self.tau, self.updates = decay, tau, 0

    @torch.no_grad()
    def update(self, model):
        self.updates += 1
        d = self.decay * (1 - math.exp(-self.updates / self.tau))
        msd = model.state_dict()
        mine = self.model.state_dict()
        floats = [k for k, v in mine.items() if v.dtype.is_floating_point]
        ema_t = [mine[k] for k in floats]
        torch._foreach_mul_(ema_t, d)  # one launch per group, not two per tensor
        torch._foreach_add_(ema_t, [msd[k].detach() for k in floats], alpha=1 - d)
        for k, v in mine.items():
            if not v.dtype.is_floating_point:
                v.copy_(msd[k])


# ---------------------------------------------------------------------------- NMS and mAP

def nms_numpy(pred, conf=0.001, iou_thr=0.7, max_det=300, max_candidates=1000):
    """pred [4 + C, N] (cx, cy, w, h, scores) -> boxes [K, 4] xyxy, scores [K], classes [K].
    Multi-label: every (candidate, class) with score >= conf competes; greedy NMS per class."""
    C = pred.shape[0] - 4
    xywh, scores = pred[:4].T, pred[4:].T  # [N, 4], [N, C]
    boxes = np.concatenate((xywh[:, :2] - xywh[:, 2:] / 2, xywh[:, :2] + xywh[:, 2:] / 2), 1)
    cand, cls = np.nonzero(scores >= conf)
    s = scores[cand, cls]
    if len(s) > max_candidates:
        keep = np.argpartition(-s, max_candidates)[:max_candidates]
        cand, cls, s = cand[keep], cls[keep], s[keep]
    order = np.argsort(-s, kind="stable")
    cand, cls, s = cand[order], cls[order], s[order]
    b = boxes[cand] + (cls[:, None] * 8192.0)  # classes never overlap
    area = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    alive = np.ones(len(s), bool)
    kept = []
    for i in range(len(s)):
        if not alive[i]:
            continue
        kept.append(i)
        if len(kept) >= max_det:
            break
        rest = np.nonzero(alive[i + 1:])[0] + i + 1
        if len(rest) == 0:
            break
        xx1 = np.maximum(b[i, 0], b[rest, 0])
        yy1 = np.maximum(b[i, 1], b[rest, 1])
        xx2 = np.minimum(b[i, 2], b[rest, 2])
        yy2 = np.minimum(b[i, 3], b[rest, 3])
        inter = np.clip(xx2 - xx1, 0, None) * np.clip(yy2 - yy1, 0, None)
        iou = inter / (area[i] + area[rest] - inter + 1e-9)
        alive[rest[iou > iou_thr]] = False
    kept = np.array(kept, np.int64)
    return boxes[cand[kept]], s[kept], cls[kept]


def box_iou_np(a, b):
    """[n, 4] x [m, 4] xyxy -> [n, m]."""
    xx1 = np.maximum(a[:, None, 0], b[None, :, 0])
    yy1 = np.maximum(a[:, None, 1], b[None, :, 1])
    xx2 = np.minimum(a[:, None, 2], b[None, :, 2])
    yy2 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(xx2 - xx1, 0, None) * np.clip(yy2 - yy1, 0, None)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    return inter / (area_a[:, None] + area_b[None, :] - inter + 1e-12)


IOU_THRESHOLDS = np.linspace(0.5, 0.95, 10)


def average_precision(records, num_gt):
    """records: list of (score, tp[10]) of one class over all images -> AP per IoU threshold,
    COCO's 101-point interpolation (precision made monotone, sampled at recall 0, 0.01 .. 1)."""
    if num_gt == 0:
        return None
    if not records:
        return np.zeros(len(IOU_THRESHOLDS))
    scores = np.array([r[0] for r in records])
    tps = np.array([r[1] for r in records], bool)  # [D, 10]
    order = np.argsort(-scores, kind="mergesort")
    tps = tps[order]
    ctp = np.cumsum(tps, 0)
    cfp = np.cumsum(~tps, 0)
    recall = ctp / num_gt
    precision = ctp / np.maximum(ctp + cfp, 1)
    ap = np.zeros(len(IOU_THRESHOLDS))
    points = np.linspace(0, 1, 101)
    for t in range(len(IOU_THRESHOLDS)):
        p = np.maximum.accumulate(precision[::-1, t])[::-1]
        idx = np.searchsorted(recall[:, t], points, side="left")
        ap[t] = np.where(idx < len(p), p[np.minimum(idx, len(p) - 1)], 0.0).mean()
    return ap


def evaluate_map(detections, truths, nc):
    """detections: per image (boxes, scores, classes); truths: per image [n, 5] (class, xyxy).
    COCO-style matching per image and class: detections by descending score, each takes the
    unmatched truth it overlaps most if that IoU >= the threshold."""
    records = [[] for _ in range(nc)]
    num_gt = np.zeros(nc, np.int64)
    for (db, ds, dc), gt in zip(detections, truths):
        gc = gt[:, 0].astype(np.int64)
        for c in range(nc):
            g = gt[gc == c, 1:5]
            num_gt[c] += len(g)
            sel = dc == c
            if not sel.any():
                continue
            b, s = db[sel], ds[sel]
            order = np.argsort(-s, kind="stable")
            b, s = b[order], s[order]
            if len(g) == 0:
                for k in range(len(s)):
                    records[c].append((s[k], np.zeros(len(IOU_THRESHOLDS), bool)))
                continue
            iou = box_iou_np(b, g)
            matched = np.zeros((len(IOU_THRESHOLDS), len(g)), bool)
            for k in range(len(s)):
                tp = np.zeros(len(IOU_THRESHOLDS), bool)
                if iou[k].max() >= IOU_THRESHOLDS[0]:
                    for t, thr in enumerate(IOU_THRESHOLDS):
                        cand = np.where(matched[t], -1.0, iou[k])
                        j = int(cand.argmax())
                        if cand[j] >= thr:
                            matched[t, j] = True
                            tp[t] = True
                records[c].append((s[k], tp))
    per_class = {}
    aps = []
    for c in range(nc):
        ap = average_precision(records[c], int(num_gt[c]))
        if ap is None:
            continue
        per_class[yolo.CLASS_NAMES[c]] = {"ap50": float(ap[0]), "ap50_95": float(ap.mean()),
                                          "num_truth": int(num_gt[c])}
        aps.append(ap)
    aps = np.array(aps)
    return {"map50": float(aps[:, 0].mean()), "map50_95": float(aps.mean()),
            "per_class": per_class, "num_truth": int(num_gt.sum())}


@torch.no_grad()
def run_eval(net, lib_path, num_frames, device, workers, batch=50):
    net.eval()
    batch = min(batch, num_frames)
    items = (num_frames + batch - 1) // batch
    loader = ScenePrefetcher(lib_path, lambda k, i: k * batch + i, items, batch, 640, workers, device)
    detections, truths = [], []
    for k, (imgs, boxes, counts) in enumerate(loader):
        out = net(images_to_float(imgs)).float().cpu().numpy()
        for i in range(len(out)):
            if k * batch + i >= num_frames:
                break
            detections.append(nms_numpy(out[i]))
            truths.append(boxes[i, :counts[i]].numpy())
    return evaluate_map(detections, truths, net.nc)


# ------------------------------------------------------------------------------ golden file

def write_golden(path, net_cpu, lib_path):
    """See the module docstring for the format. Returns per-case max |fp32 - fp64|."""
    net32 = net_cpu.float().eval()
    import copy
    net64 = copy.deepcopy(net32).double().eval()
    lines, blobs, offset, diffs = ["course-detector-golden 1"], [], 0, {}
    with torch.no_grad():
        for name, seed, h, w in GOLDEN_CASES:
            rgb, _ = render(lib_path, seed, h, w)
            x32 = torch.from_numpy(to_input(rgb))[None]
            y32 = net32(x32)[0]
            y64 = net64(x32.double())[0]
            out = y64.float().numpy().astype("<f4")
            diffs[name] = float((y32.double() - y64).abs().max())
            rows, cols = out.shape
            assert rows == 4 + net32.nc and cols == yolo.num_candidates(h, w)
            offset = (offset + 63) // 64 * 64
            lines.append(f"case {name} {seed} {h} {w} {rows} {cols} {offset}")
            blobs.append((offset, out.tobytes()))
            offset += out.nbytes
    data = bytearray(offset)
    for off, b in blobs:
        data[off:off + len(b)] = b
    lines.append(f"data {len(data)}")
    with open(path, "wb") as f:
        f.write(("\n".join(lines) + "\n").encode("ascii"))
        f.write(bytes(data))
    return diffs


def export_onnx(path, net_cpu):
    net = net_cpu.float().eval()
    dummy = torch.zeros(1, 3, 640, 640)
    kw = dict(input_names=["images"], output_names=["output0"], opset_version=17,
              dynamic_axes={"images": {0: "batch"}, "output0": {0: "batch"}})
    try:
        torch.onnx.export(net, (dummy,), path, dynamo=False, **kw)
    except TypeError:  # a torch without the dynamo switch
        torch.onnx.export(net, (dummy,), path, **kw)


# ---------------------------------------------------------------------------------- training

def param_groups(net, weight_decay):
    decay, no_decay = [], []
    for name, p in net.named_parameters():
        (decay if p.dim() == 4 else no_decay).append(p)  # conv weights decay; BN and biases not
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def train(args, device):
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    net = yolo.YOLOv8n().to(device)
    if device.type == "cuda":
        net = net.to(memory_format=torch.channels_last)
        torch.backends.cudnn.benchmark = True
    opt = torch.optim.AdamW(param_groups(net, args.weight_decay), lr=args.lr, betas=(0.9, 0.999),
                            fused=device.type == "cuda")
    ema = EMA(net, args.ema_decay, args.ema_tau)
    criterion = DetectionLoss(net.nc)
    use_amp = device.type == "cuda" and not args.no_amp
    base = TRAIN_SEED_BASE + args.seed * 100_000_000
    batch = args.batch
    loader = ScenePrefetcher(args.scenes_lib, lambda k, i: base + k * batch + i, args.steps, batch,
                             args.imgsz, args.workers, device)

    log(f"training: up to {args.steps} steps x batch {batch} at {args.imgsz}, at most "
        f"{args.train_seconds:.0f} s, lr {args.lr}, AdamW, warm-up {args.warmup}, "
        f"amp {'bf16' if use_amp else 'off'}, {args.workers} loader workers, device {device}")
    net.train()
    t_start = time.perf_counter()
    t_log, n_log, sum_parts = t_start, 0, torch.zeros(3, device=device)
    step = 0
    wait_data = 0.0
    t_fetch = time.perf_counter()
    for imgs, boxes, counts in loader:
        wait_data += time.perf_counter() - t_fetch
        elapsed = time.perf_counter() - t_start
        progress = max(step / args.steps, elapsed / args.train_seconds)
        if progress >= 1.0:
            break
        warm = min(1.0, (step + 1) / args.warmup)
        lr = args.lr * warm * (args.final_lr + (1 - args.final_lr) * 0.5 * (1 + math.cos(math.pi * progress)))
        for g in opt.param_groups:
            g["lr"] = lr
        x = images_to_float(imgs)
        m = max(1, int(counts.max()))
        gt = boxes[:, :m].to(device, non_blocking=True)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=use_amp):
            outs = net(x)
        loss, parts = criterion(outs, gt)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 10.0)
        opt.step()
        ema.update(net)
        sum_parts += parts
        n_log += 1
        step += 1
        if step % args.log_every == 0 or step == 1:
            p = (sum_parts / n_log).tolist()
            now = time.perf_counter()
            log(f"step {step:5d}  loss box {p[0]:.4f} cls {p[1]:.4f} dfl {p[2]:.4f}  lr {lr:.2e}  "
                f"{n_log * batch / (now - t_log):7.1f} img/s  data wait {wait_data:6.1f} s  "
                f"elapsed {now - t_start:6.1f} s")
            t_log, n_log, sum_parts = now, 0, torch.zeros(3, device=device)
        t_fetch = time.perf_counter()
    if device.type == "cuda":
        torch.cuda.synchronize()
    train_seconds = time.perf_counter() - t_start
    log(f"training done: {step} steps, {step * batch} images in {train_seconds:.1f} s "
        f"(data wait {wait_data:.1f} s)")
    return ema.model, {"steps": step, "images": step * batch, "train_seconds": train_seconds,
                       "data_wait_seconds": wait_data}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--scenes-lib", default=os.path.join(here, "../../../build/lessons/12-engine/liblesson12_scenes.so"))
    ap.add_argument("--out", default="out-detector")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=4000, help="most training steps")
    ap.add_argument("--train-seconds", type=float, default=270.0, help="most training wall time")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--final-lr", type=float, default=0.02, help="final lr as a fraction of --lr")
    ap.add_argument("--warmup", type=int, default=150, help="linear warm-up steps")
    ap.add_argument("--weight-decay", type=float, default=5e-4)
    ap.add_argument("--ema-decay", type=float, default=0.995)
    ap.add_argument("--ema-tau", type=float, default=200.0)
    ap.add_argument("--no-amp", action="store_true")
    ap.add_argument("--eval-frames", type=int, default=500)
    ap.add_argument("--workers", type=int, default=max(1, min(14, (os.cpu_count() or 2) - 2)),
                    help="scene render threads")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--log-every", type=int, default=50)
    args = ap.parse_args()
    args.scenes_lib = os.path.abspath(args.scenes_lib)
    if not os.path.exists(args.scenes_lib):
        sys.exit(f"scenes library not found: {args.scenes_lib} (build target lesson12_scenes)")
    if args.imgsz % 32 != 0:
        sys.exit("--imgsz must be a multiple of 32")
    os.makedirs(args.out, exist_ok=True)
    device = torch.device(args.device)
    t0 = time.perf_counter()
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    metrics = {"command": " ".join([os.path.basename(sys.executable)] + sys.argv), "seed": args.seed,
               "torch": torch.__version__, "cuda": torch.version.cuda, "gpu": gpu,
               "cpu": platform.processor() or platform.machine(), "args": vars(args), "errors": []}
    log(f"torch {torch.__version__}, device {device}{' (' + gpu + ')' if gpu else ''}, "
        f"scenes {args.scenes_lib}")
    weights_path = os.path.join(args.out, "yolov8n_scenes.weights")

    try:
        ema_model, info = train(args, device)
        metrics.update(info)
        # The stored file is the checkpoint: write it, then load it back (f16 conv weights) and
        # use only that from here on.
        n = yolo.write_weights(weights_path, ema_model, args.seed, 640)
        net = yolo.load_weights(yolo.YOLOv8n(), weights_path).eval()
        log(f"wrote {weights_path} ({n} tensors, {os.path.getsize(weights_path)} bytes), loaded back")

        def step_safely(what, fn):
            try:
                return fn()
            except Exception as e:  # one failed output must not lose the others
                log(f"{what} FAILED: {type(e).__name__}: {e}")
                metrics["errors"].append(f"{what}: {type(e).__name__}: {e}")
                return None

        def golden():
            diffs = write_golden(os.path.join(args.out, "golden.bin"), net, args.scenes_lib)
            metrics["golden"] = {"cases": [c[0] for c in GOLDEN_CASES], "stored": "float64 forward rounded to float32",
                                 "max_abs_fp32_vs_fp64": diffs}
            log(f"wrote golden.bin; max |fp32 - fp64| per case: {diffs}")
        step_safely("golden", golden)

        def evaluate():
            t = time.perf_counter()
            net_dev = yolo.load_weights(yolo.YOLOv8n(), weights_path).to(device).eval()
            res = run_eval(net_dev, args.scenes_lib, args.eval_frames, device, args.workers)
            res["eval_frames"] = args.eval_frames
            res["eval_seconds"] = time.perf_counter() - t
            metrics["eval"] = res
            log(f"held-out scenes 0..{args.eval_frames - 1} ({res['num_truth']} objects): "
                f"mAP@0.5 {res['map50']:.4f}  mAP@0.5:0.95 {res['map50_95']:.4f}")
            for c, v in res["per_class"].items():
                log(f"  {c:8s} AP50 {v['ap50']:.4f}  AP50:95 {v['ap50_95']:.4f}  ({v['num_truth']} objects)")
        step_safely("eval", evaluate)

        def onnx():
            path = os.path.join(args.out, "yolov8n_scenes.onnx")
            try:
                export_onnx(path, net)
            except Exception as e:
                if not isinstance(e, ImportError) and "not installed" not in str(e):
                    raise
                log(f"ONNX export skipped: {e} (install onnx to export)")
                metrics["onnx"] = f"skipped: {e}"
                return
            metrics["onnx"] = os.path.basename(path)
            log(f"wrote {path} ({os.path.getsize(path)} bytes)")
        step_safely("onnx", onnx)
    finally:
        metrics["total_seconds"] = time.perf_counter() - t0
        with open(os.path.join(args.out, "metrics.json"), "w") as f:
            json.dump(metrics, f, indent=2)
        log(f"wrote {os.path.join(args.out, 'metrics.json')}; total {metrics['total_seconds']:.1f} s")
    if metrics["errors"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
