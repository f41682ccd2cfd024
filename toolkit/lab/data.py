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
    x_train, x_test : torch.Tensor, shape (n, 1, 8, 8), float32
        Pixel intensities scaled to [0, 1].
    y_train, y_test : torch.Tensor, shape (n,), int64
        Class labels 0..9.
    """

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor


def load_digits_split(*, test_fraction: float = 0.2, split_seed: int = 0,
                      train_subset: int | None = None) -> Split:
    """Load the digits and split them, stratified by class, with a fixed seed.

    Parameters
    ----------
    test_fraction : float
        Share of images held out for testing. Default 0.2 (360 of 1,797).
    split_seed : int
        Seed of the split; fixed (0) so every run tests on the same images.
    train_subset : int, optional
        Keep only the first ``train_subset`` training images (fast preset).

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
    t = torch.from_numpy
    return Split(t(np.ascontiguousarray(x_tr)), t(y_tr), t(np.ascontiguousarray(x_te)), t(y_te))
