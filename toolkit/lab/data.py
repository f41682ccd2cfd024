"""The lab's image data: scikit-learn's handwritten digits, split once.

scikit-learn ships the UCI "Optical Recognition of Handwritten Digits" test
set inside the package (1,797 grey 8 × 8 images, ten classes, pixel values
0..16), so the lab trains on real images offline. Larger image sets on PyPI
(MNIST, CIFAR) are downloaded at run time, which this project cannot do, and
would not train 5 × 200 epochs of a 12-layer ViT on two CPU cores anyway.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

DATASET_NAME = "sklearn.datasets.load_digits (UCI optical recognition of handwritten digits, 8x8)"


@dataclass(frozen=True)
class Split:
    """A held-out split of image tensors.

    Attributes
    ----------
    x_train, x_test : torch.Tensor, shape (n, 1, size, size), float32
        Pixel intensities scaled to [0, 1] (size 8, or the upsampled side).
    y_train, y_test : torch.Tensor, shape (n,), int64
        Class labels 0..9.
    """

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor


def upsample(images: torch.Tensor, size: int) -> torch.Tensor:
    """Bilinear upsampling of square images to ``size`` × ``size`` pixels.

    Parameters
    ----------
    images : torch.Tensor, shape (n, channels, s, s)
    size : int
        New side, a whole multiple of ``s`` (16 or 32 for the 8 × 8 digits).

    Returns
    -------
    torch.Tensor, shape (n, channels, size, size)
        ``F.interpolate(mode="bilinear", align_corners=False)``: pixel centres
        of the new grid sample the old one, values stay in the old range.
        The same images at more pixels: more tokens, no new information.

    Raises
    ------
    InvalidOptionError
        ``size`` is not a whole multiple of the current side.
    """
    from toolkit.errors import InvalidOptionError

    side = images.shape[-1]
    if size == side:
        return images
    if size < side or size % side:
        raise InvalidOptionError("image_size", size, f"a whole multiple of {side}", "upsample")
    return torch.nn.functional.interpolate(images, size=(size, size), mode="bilinear", align_corners=False)


def load_digits_split(*, test_fraction: float = 0.2, split_seed: int = 0,
                      train_subset: int | None = None, image_size: int = 8) -> Split:
    """Load the digits and split them, stratified by class, with a fixed seed.

    Parameters
    ----------
    test_fraction : float
        Share of images held out for testing. Default 0.2 (360 of 1,797).
    split_seed : int
        Seed of the split; fixed (0) so every run tests on the same images.
    train_subset : int, optional
        Keep only the first ``train_subset`` training images (fast preset).
    image_size : int
        Side of the images returned: 8 (the originals) or a multiple of 8,
        reached by :func:`upsample`. Default 8.

    Returns
    -------
    Split
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.images.astype(np.float32) / 16.0)[:, None]
    y = digits.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(
        x, y, test_size=test_fraction, random_state=split_seed, stratify=y)
    if train_subset is not None:
        x_tr, y_tr = x_tr[:train_subset], y_tr[:train_subset]
    def t(a):
        return upsample(torch.from_numpy(np.ascontiguousarray(a)), image_size)

    return Split(t(x_tr), torch.from_numpy(y_tr), t(x_te), torch.from_numpy(y_te))
