"""Small CNNs in the shape of torchvision's families, written in plain torch.

torchvision is not used: the torchvision wheel built for the CPU torch 2.13 does not import
beside it on the test machines, and torchvision 0.29 from PyPI pulls a CUDA torch (~5.5 GB).
These modules use the same layers in the same arrangement (the ONNX an exporter writes
depends on the layers, not on the package that defines them), at a few channels each so a
zoo case exports and runs in well under a second.

Every family is built under a fixed seed, and BatchNorm's running statistics are set to
seeded non-trivial values so the exported (folded or not) normalisation is not an identity.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F

SEED = 0
IMAGE = (3, 32, 32)  # channels, height, width of every CNN's input


def _bn(channels: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(channels)


class BasicBlock(nn.Module):
    """ResNet-18's block: two 3x3 conv+BN, identity or 1x1 projection shortcut, ReLU after the sum."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = _bn(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = _bn(c_out)
        self.down: nn.Module | None = None
        if stride != 1 or c_in != c_out:
            self.down = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), _bn(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet(nn.Module):
    """Stem conv + BN + ReLU + max pool, two basic blocks, adaptive average pool, Linear."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), _bn(8), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        self.layers = nn.Sequential(BasicBlock(8, 8, 1), BasicBlock(8, 16, 2))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.layers(self.stem(x))), 1))


class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1x1 expand, 3x3 depthwise, ReLU6 after both, linear 1x1 project,
    residual when the shape is kept."""

    def __init__(self, c_in: int, c_out: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = c_in * expand
        self.residual = stride == 1 and c_in == c_out
        self.body = nn.Sequential(
            nn.Conv2d(c_in, hidden, 1, bias=False), _bn(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False), _bn(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, c_out, 1, bias=False), _bn(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        return x + y if self.residual else y


class MobileNetV2(nn.Module):
    """Stem conv + ReLU6, three inverted residuals (one with a residual), 1x1 head, pool, dropout, Linear."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, 2, 1, bias=False), _bn(8), nn.ReLU6(),
            InvertedResidual(8, 8, 1, 1), InvertedResidual(8, 12, 2, 4), InvertedResidual(12, 12, 1, 4),
            nn.Conv2d(12, 32, 1, bias=False), _bn(32), nn.ReLU6())
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(32, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


class SqueezeExcite(nn.Module):
    """Squeeze-and-excitation: pool, 1x1 reduce + ``inner``, 1x1 expand + ``gate``, scale
    (EfficientNet's SiLU and sigmoid by default; MobileNetV3's ReLU and Hardsigmoid)."""

    def __init__(self, channels: int, reduced: int, inner: Callable[[torch.Tensor], torch.Tensor] = F.silu,
                 gate: Callable[[torch.Tensor], torch.Tensor] = torch.sigmoid) -> None:
        super().__init__()
        self.reduce = nn.Conv2d(channels, reduced, 1)
        self.expand = nn.Conv2d(reduced, channels, 1)
        self.inner, self.gate = inner, gate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = F.adaptive_avg_pool2d(x, 1)
        return x * self.gate(self.expand(self.inner(self.reduce(s))))


class InvertedResidualV3(nn.Module):
    """MobileNetV3's block: 1x1 expand (when wider), depthwise (3x3 or 5x5), each + BN + ReLU or
    Hardswish, optional squeeze-excite, linear 1x1 project, residual when the shape is kept."""

    def __init__(self, c_in: int, hidden: int, c_out: int, kernel: int, stride: int, se: bool,
                 act: type[nn.Module]) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        if hidden != c_in:
            layers += [nn.Conv2d(c_in, hidden, 1, bias=False), _bn(hidden), act()]
        layers += [nn.Conv2d(hidden, hidden, kernel, stride, kernel // 2, groups=hidden, bias=False), _bn(hidden),
                   act()]
        if se:
            layers.append(SqueezeExcite(hidden, max(8, hidden // 4), F.relu, F.hardsigmoid))
        layers += [nn.Conv2d(hidden, c_out, 1, bias=False), _bn(c_out)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and c_in == c_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        return x + y if self.residual else y


class MobileNetV3(nn.Module):
    """torchvision's mobilenet_v3_small layout at a few channels: stem conv + Hardswish; blocks
    with ReLU then Hardswish, 3x3 and 5x5 depthwise, squeeze-excite; 1x1 head + Hardswish, pool,
    Linear + Hardswish, dropout, Linear."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, 2, 1, bias=False), _bn(8), nn.Hardswish(),
            InvertedResidualV3(8, 8, 8, 3, 2, True, nn.ReLU),
            InvertedResidualV3(8, 32, 12, 3, 2, False, nn.ReLU),
            InvertedResidualV3(12, 48, 12, 3, 1, False, nn.ReLU),
            InvertedResidualV3(12, 48, 16, 5, 2, True, nn.Hardswish),
            InvertedResidualV3(16, 64, 16, 5, 1, True, nn.Hardswish),
            nn.Conv2d(16, 48, 1, bias=False), _bn(48), nn.Hardswish())
        self.classifier = nn.Sequential(nn.Linear(48, 64), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(64, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


class Fire(nn.Module):
    """SqueezeNet's fire module: 1x1 squeeze, then 1x1 and 3x3 expands concatenated."""

    def __init__(self, c_in: int, squeeze: int, expand: int) -> None:
        super().__init__()
        self.squeeze = nn.Conv2d(c_in, squeeze, 1)
        self.e1 = nn.Conv2d(squeeze, expand, 1)
        self.e3 = nn.Conv2d(squeeze, expand, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = F.relu(self.squeeze(x))
        return torch.cat([F.relu(self.e1(s)), F.relu(self.e3(s))], 1)


class SqueezeNet(nn.Module):
    """SqueezeNet 1.1's layout: conv, ceil-mode max pools between fire modules, a 1x1 conv
    classifier, adaptive average pool, flatten."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, 2), nn.ReLU(), nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(16, 4, 8), Fire(16, 4, 8), nn.MaxPool2d(3, 2, ceil_mode=True), Fire(16, 6, 12))
        self.classifier = nn.Sequential(nn.Dropout(0.5), nn.Conv2d(24, classes, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.classifier(self.features(x)), 1)


class MBConv(nn.Module):
    """EfficientNet's MBConv: expand + SiLU, depthwise + SiLU, squeeze-excite, project, residual."""

    def __init__(self, channels: int, expand: int) -> None:
        super().__init__()
        hidden = channels * expand
        self.body = nn.Sequential(
            nn.Conv2d(channels, hidden, 1, bias=False), _bn(hidden), nn.SiLU(),
            nn.Conv2d(hidden, hidden, 5, 1, 2, groups=hidden, bias=False), _bn(hidden), nn.SiLU(),
            SqueezeExcite(hidden, max(1, channels // 4)),
            nn.Conv2d(hidden, channels, 1, bias=False), _bn(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


class EfficientNet(nn.Module):
    """Stem conv + SiLU, one MBConv block, 1x1 head + SiLU, pool, Linear."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, 2, 1, bias=False), _bn(8), nn.SiLU(), MBConv(8, 4),
            nn.Conv2d(8, 24, 1, bias=False), _bn(24), nn.SiLU())
        self.fc = nn.Linear(24, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


class UNet(nn.Module):
    """A two-level UNet: conv blocks, max-pool down, one ConvTranspose2d up and one bilinear
    interpolate up, skip connections concatenated, 1x1 conv to per-pixel logits."""

    def __init__(self, classes: int = 3) -> None:
        super().__init__()
        self.enc1, self.enc2, self.mid = self._block(3, 8), self._block(8, 16), self._block(16, 16)
        self.up2 = nn.ConvTranspose2d(16, 16, 2, 2)
        self.dec2 = self._block(32, 8)
        self.dec1 = self._block(16, 8)
        self.head = nn.Conv2d(8, classes, 1)

    @staticmethod
    def _block(c_in: int, c_out: int) -> nn.Sequential:
        return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1), _bn(c_out), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e1 = self.enc1(x)
        e2 = self.enc2(F.max_pool2d(e1, 2))
        m = self.mid(F.max_pool2d(e2, 2))
        d2 = self.dec2(torch.cat([self.up2(m), e2], 1))
        up = F.interpolate(d2, scale_factor=2.0, mode="bilinear", align_corners=False)
        return self.head(self.dec1(torch.cat([up, e1], 1)))


FAMILIES: dict[str, Callable[[], nn.Module]] = {
    "resnet": ResNet, "mobilenetv2": MobileNetV2, "mobilenetv3": MobileNetV3, "squeezenet": SqueezeNet,
    "efficientnet": EfficientNet, "unet": UNet,
}


def build(family: str) -> nn.Module:
    """The family's module in eval mode, weights and BatchNorm statistics from ``SEED``."""
    torch.manual_seed(SEED)
    model = FAMILIES[family]()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.running_mean.uniform_(-0.5, 0.5)
                module.running_var.uniform_(0.5, 2.0)
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.2, 0.2)
    return model.eval()
