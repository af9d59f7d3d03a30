#!/usr/bin/env python3
"""Writes the ONNX model of lesson 12's detector from the committed weights file, for TensorRT.

  python3 lessons/12-engine/train/export_onnx.py [--weights data/yolov8n_scenes.weights] [--out yolov8n_scenes.onnx]

The ONNX file holds the same values as the weights file (its convolution weights are the
stored FP16 values, widened to FP32), so the repository keeps only the weights file and this
script (a few seconds on a CPU; needs torch and onnx). Input "images" [B, 3, 640, 640] float
RGB in [0, 1] (dynamic B), output "output0" [B, 10, 8400], opset 17: what `trtexec --onnx`
expects. train_detector.py writes the same file at the end of training.
"""
import argparse
import os
import sys

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import model as yolo  # noqa: E402
from train_detector import export_onnx  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--weights", default=os.path.join(here, "..", "data", "yolov8n_scenes.weights"))
    ap.add_argument("--out", default="yolov8n_scenes.onnx")
    args = ap.parse_args()
    net = yolo.load_weights(yolo.YOLOv8n(), args.weights).eval()
    export_onnx(args.out, net)
    # The exported graph must compute what the model computes.
    x = torch.rand(2, 3, 640, 640)
    with torch.no_grad():
        want = net(x)
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes)")
    try:
        import onnx
        onnx.checker.check_model(onnx.load(args.out))
        print("onnx.checker: OK")
    except ImportError:
        print("onnx not installed: the file was not checked")
    try:
        import onnxruntime as ort
        got = ort.InferenceSession(args.out).run(None, {"images": x.numpy()})[0]
        err = float((torch.from_numpy(got) - want).abs().max())
        print(f"onnxruntime vs PyTorch on 2 random images: max |difference| {err:.2e}")
        if err > 1e-2:
            sys.exit("the ONNX model does not compute what the PyTorch model computes")
    except ImportError:
        print("onnxruntime not installed: the file was not run")


if __name__ == "__main__":
    main()
