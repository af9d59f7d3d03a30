"""YOLOv8n in plain PyTorch, with Ultralytics' state_dict key layout (model.0 ... model.22).

The layer table, the C2f / SPPF / Detect wiring and the decode are the lesson's build spec
(network.hpp says the same from the C++ side):

  model.0  Conv(3,16,3,s2)   model.1 Conv(16,32,3,2)   model.2 C2f(32,32,n1,shortcut)
  model.3  Conv(32,64,3,2)   model.4 C2f(64,64,2,sc)   model.5 Conv(64,128,3,2)
  model.6  C2f(128,128,2,sc) model.7 Conv(128,256,3,2) model.8 C2f(256,256,1,sc)
  model.9  SPPF(256,256,5)   10 upsample(9)  11 cat(10, 6)  model.12 C2f(384,128,1)
  13 upsample(12)  14 cat(13, 4)  model.15 C2f(192,64,1) -> P3
  model.16 Conv(64,64,3,2)   17 cat(16, 12)  model.18 C2f(192,128,1) -> P4
  model.19 Conv(128,128,3,2) 20 cat(19, 9)   model.21 C2f(384,256,1) -> P5
  model.22 Detect(P3, P4, P5): cv2.i (box: 4 x 16 DFL logits), cv3.i (class logits)

forward():
  training mode: a list of three tensors [B, 64 + C, H/s, W/s] (box logits then class logits),
                 what the loss needs;
  eval mode:     [B, 4 + C, N] float: cx, cy, w, h in input pixels, then sigmoid class scores;
                 N candidates ordered P3 (row-major y, x), then P4, then P5.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

NUM_CLASSES = 6
CLASS_NAMES = ["red", "green", "blue", "yellow", "magenta", "cyan"]
REG_MAX = 16
STRIDES = (8, 16, 32)
BN_EPS = 1e-3
BN_MOMENTUM = 0.03


class Conv(nn.Module):
    """conv (no bias) + BatchNorm + SiLU; keys X.conv.weight, X.bn.*"""

    def __init__(self, c1, c2, k=1, s=1):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, k // 2, bias=False)
        self.bn = nn.BatchNorm2d(c2, eps=BN_EPS, momentum=BN_MOMENTUM)
        self.act = nn.SiLU()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class Bottleneck(nn.Module):
    def __init__(self, c, shortcut):
        super().__init__()
        self.cv1 = Conv(c, c, 3)
        self.cv2 = Conv(c, c, 3)
        self.add = shortcut

    def forward(self, x):
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C2f(nn.Module):
    """cv1 to 2c channels, split in two halves y0, y1; n bottlenecks chained from y1, each output
    kept; cv2 over cat(y0, y1, m0(y1), m1(m0(y1)), ...)."""

    def __init__(self, c1, c2, n=1, shortcut=False):
        super().__init__()
        self.c = c2 // 2
        self.cv1 = Conv(c1, 2 * self.c, 1)
        self.cv2 = Conv((2 + n) * self.c, c2, 1)
        self.m = nn.ModuleList(Bottleneck(self.c, shortcut) for _ in range(n))

    def forward(self, x):
        y = list(self.cv1(x).chunk(2, 1))
        for m in self.m:
            y.append(m(y[-1]))
        return self.cv2(torch.cat(y, 1))


class SPPF(nn.Module):
    def __init__(self, c1, c2, k=5):
        super().__init__()
        c_ = c1 // 2
        self.cv1 = Conv(c1, c_, 1)
        self.cv2 = Conv(4 * c_, c2, 1)
        self.k = k

    def forward(self, x):
        x = self.cv1(x)
        y1 = F.max_pool2d(x, self.k, 1, self.k // 2)
        y2 = F.max_pool2d(y1, self.k, 1, self.k // 2)
        y3 = F.max_pool2d(y2, self.k, 1, self.k // 2)
        return self.cv2(torch.cat((x, y1, y2, y3), 1))


class Detect(nn.Module):
    def __init__(self, nc, ch):
        super().__init__()
        self.nc = nc
        self.no = 4 * REG_MAX + nc
        c2 = max(16, ch[0] // 4, 4 * REG_MAX)  # 64
        c3 = max(ch[0], min(nc, 100))  # 64
        self.cv2 = nn.ModuleList(
            nn.Sequential(Conv(c, c2, 3), Conv(c2, c2, 3), nn.Conv2d(c2, 4 * REG_MAX, 1)) for c in ch)
        self.cv3 = nn.ModuleList(
            nn.Sequential(Conv(c, c3, 3), Conv(c3, c3, 3), nn.Conv2d(c3, nc, 1)) for c in ch)

    def init_biases(self, imgsz=640):
        # Box logits start at 1.0 (a broad distribution over the 16 bins); class logits at the
        # prior of ~5 objects per image spread over the level's cells and the classes, so the
        # first steps' BCE is not dominated by a sea of confident negatives.
        for box, cls, s in zip(self.cv2, self.cv3, STRIDES):
            box[-1].bias.data[:] = 1.0
            cls[-1].bias.data[:] = math.log(5 / self.nc / (imgsz / s) ** 2)

    def forward(self, feats):
        outs = [torch.cat((b(x), c(x)), 1) for x, b, c in zip(feats, self.cv2, self.cv3)]
        if self.training:
            return outs
        return decode(outs, self.nc)


def make_anchors(shapes, device, dtype):
    """Anchor centres (x + 0.5, y + 0.5) in grid cells, [N, 2], and each one's stride, [N, 1]."""
    points, strides = [], []
    for (h, w), s in zip(shapes, STRIDES):
        sy = torch.arange(h, device=device, dtype=dtype) + 0.5
        sx = torch.arange(w, device=device, dtype=dtype) + 0.5
        yy, xx = torch.meshgrid(sy, sx, indexing="ij")
        points.append(torch.stack((xx, yy), -1).reshape(-1, 2))
        strides.append(torch.full((h * w, 1), float(s), device=device, dtype=dtype))
    return torch.cat(points), torch.cat(strides)


def dfl_expectation(box_logits):
    """[..., 4 * 16] logits -> [..., 4] distances (l, t, r, b) in grid cells: softmax per side,
    then sum(i * p_i)."""
    shape = box_logits.shape[:-1]
    p = box_logits.reshape(*shape, 4, REG_MAX).softmax(-1)
    bins = torch.arange(REG_MAX, device=p.device, dtype=p.dtype)
    return (p * bins).sum(-1)


def decode(outs, nc):
    """Per-level raw outputs -> [B, 4 + nc, N]: cx, cy, w, h (input pixels), sigmoid scores."""
    b = outs[0].shape[0]
    shapes = [o.shape[2:] for o in outs]
    x = torch.cat([o.reshape(b, 4 * REG_MAX + nc, -1) for o in outs], 2)  # [B, no, N]
    box, cls = x[:, : 4 * REG_MAX], x[:, 4 * REG_MAX:]
    anchors, strides = make_anchors(shapes, x.device, x.dtype)  # [N, 2], [N, 1]
    dist = dfl_expectation(box.transpose(1, 2))  # [B, N, 4]
    lt, rb = dist[..., :2], dist[..., 2:]
    x1y1 = anchors - lt
    x2y2 = anchors + rb
    cxcy = (x1y1 + x2y2) / 2
    wh = x2y2 - x1y1
    xywh = torch.cat((cxcy, wh), -1) * strides  # [B, N, 4]
    return torch.cat((xywh.transpose(1, 2), cls.sigmoid()), 1)


class YOLOv8n(nn.Module):
    def __init__(self, nc=NUM_CLASSES):
        super().__init__()
        self.nc = nc
        self.model = nn.ModuleList([
            Conv(3, 16, 3, 2),  # 0
            Conv(16, 32, 3, 2),  # 1
            C2f(32, 32, 1, True),  # 2
            Conv(32, 64, 3, 2),  # 3
            C2f(64, 64, 2, True),  # 4
            Conv(64, 128, 3, 2),  # 5
            C2f(128, 128, 2, True),  # 6
            Conv(128, 256, 3, 2),  # 7
            C2f(256, 256, 1, True),  # 8
            SPPF(256, 256, 5),  # 9
            nn.Upsample(scale_factor=2, mode="nearest"),  # 10
            nn.Identity(),  # 11 concat (no parameters)
            C2f(384, 128, 1, False),  # 12
            nn.Upsample(scale_factor=2, mode="nearest"),  # 13
            nn.Identity(),  # 14 concat
            C2f(192, 64, 1, False),  # 15 -> P3
            Conv(64, 64, 3, 2),  # 16
            nn.Identity(),  # 17 concat
            C2f(192, 128, 1, False),  # 18 -> P4
            Conv(128, 128, 3, 2),  # 19
            nn.Identity(),  # 20 concat
            C2f(384, 256, 1, False),  # 21 -> P5
            Detect(nc, (64, 128, 256)),  # 22
        ])
        self.model[22].init_biases()

    def forward(self, x):
        m = self.model
        x = m[1](m[0](x))
        x = m[2](x)
        x4 = m[4](m[3](x))
        x6 = m[6](m[5](x4))
        x9 = m[9](m[8](m[7](x6)))
        x12 = m[12](torch.cat((m[10](x9), x6), 1))
        p3 = m[15](torch.cat((m[13](x12), x4), 1))
        p4 = m[18](torch.cat((m[16](p3), x12), 1))
        p5 = m[21](torch.cat((m[19](p4), x9), 1))
        return m[22]([p3, p4, p5])


def num_candidates(h, w):
    return sum((h // s) * (w // s) for s in STRIDES)


if __name__ == "__main__":
    net = YOLOv8n().eval()
    n_params = sum(p.numel() for p in net.parameters())
    with torch.no_grad():
        out = net(torch.rand(1, 3, 640, 640))
    print(f"params {n_params}, output {tuple(out.shape)}")
    for k, v in list(net.state_dict().items())[:6]:
        print(k, tuple(v.shape))


# ------------------------------------------------------------------------------- weights file
#
# The lesson's weights file (network.hpp reads it): a text header, then raw little-endian data.
#   course-detector-weights 1
#   model yolov8n / num_classes 6 / reg_max 16 / bn_eps 0.001 / input 640 640
#   classes red green blue yellow magenta cyan / seed S / tensors COUNT
#   NAME DTYPE NDIM D0 .. Dn-1 OFFSET     (COUNT lines; f16 for 4-D conv weights, else f32;
#                                          OFFSET in bytes from the data start, 64-aligned)
#   data BYTES
# then exactly one '\n' and BYTES of data. BatchNorm's num_batches_tracked is not stored.

WEIGHTS_MAGIC = "course-detector-weights 1"


def stored_tensors(state_dict):
    """The state_dict entries the file holds, in state_dict order."""
    return [(k, v) for k, v in state_dict.items() if not k.endswith("num_batches_tracked")]


def write_weights(path, model, seed, imgsz=640):
    import numpy as np
    lines = [WEIGHTS_MAGIC, "model yolov8n", f"num_classes {model.nc}", f"reg_max {REG_MAX}",
             f"bn_eps {BN_EPS}", f"input {imgsz} {imgsz}", "classes " + " ".join(CLASS_NAMES),
             f"seed {seed}"]
    entries, blobs, offset = [], [], 0
    for name, t in stored_tensors(model.state_dict()):
        t = t.detach().cpu().contiguous()
        if t.dim() == 4:
            arr, dtype = t.to(torch.float16).numpy().astype("<f2"), "f16"
        else:
            arr, dtype = t.to(torch.float32).numpy().astype("<f4"), "f32"
        offset = (offset + 63) // 64 * 64
        entries.append(f"{name} {dtype} {t.dim()} " + " ".join(str(d) for d in t.shape) + f" {offset}")
        blobs.append((offset, arr.tobytes()))
        offset += arr.nbytes
    data = bytearray(offset)
    for off, b in blobs:
        data[off:off + len(b)] = b
    lines.append(f"tensors {len(entries)}")
    lines += entries
    lines.append(f"data {len(data)}")
    with open(path, "wb") as f:
        f.write(("\n".join(lines) + "\n").encode("ascii"))
        f.write(bytes(data))
    return len(entries)


def read_weights(path):
    """-> (header dict, {name: float32 tensor}); raises ValueError naming what was expected."""
    import numpy as np
    raw = open(path, "rb").read()
    pos, header, tensors = 0, {}, {}

    def line():
        nonlocal pos
        end = raw.index(b"\n", pos)
        s = raw[pos:end].decode("ascii")
        pos = end + 1
        return s

    if line() != WEIGHTS_MAGIC:
        raise ValueError(f"{path}: expected first line '{WEIGHTS_MAGIC}'")
    entries = []
    while True:
        parts = line().split()
        if parts[0] == "tensors":
            for _ in range(int(parts[1])):
                p = line().split()
                ndim = int(p[2])
                entries.append((p[0], p[1], [int(d) for d in p[3:3 + ndim]], int(p[3 + ndim])))
        elif parts[0] == "data":
            size = int(parts[1])
            break
        else:
            header[parts[0]] = parts[1:]
    data = raw[pos:]
    if len(data) != size:
        raise ValueError(f"{path}: expected {size} data bytes, found {len(data)}")
    for name, dtype, shape, off in entries:
        np_dtype = {"f16": "<f2", "f32": "<f4"}[dtype]
        count = int(np.prod(shape)) if shape else 1
        arr = np.frombuffer(data, dtype=np_dtype, count=count, offset=off).reshape(shape)
        tensors[name] = torch.from_numpy(arr.astype(np.float32))
    return header, tensors


def load_weights(model, path):
    """Loads the file's values into model (num_batches_tracked left as is); every stored tensor
    must be present with its shape."""
    _, tensors = read_weights(path)
    sd = model.state_dict()
    missing = [k for k, _ in stored_tensors(sd) if k not in tensors]
    if missing:
        raise ValueError(f"{path}: missing tensors {missing[:5]}")
    with torch.no_grad():
        for k, v in tensors.items():
            if sd[k].shape != v.shape:
                raise ValueError(f"{path}: {k} has shape {tuple(v.shape)}, expected {tuple(sd[k].shape)}")
            sd[k].copy_(v.to(sd[k].dtype))
    return model
