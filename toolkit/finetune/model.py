"""Loading a causal LM from any toolkit source, and saving bf16 checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from toolkit.atomic import atomic_dir
from toolkit.constraint_types import Exempt
from toolkit.constraints import PathName, checks_options
from toolkit.errors import CheckpointFileError


@checks_options(base=Exempt("None (the embedded SmolLM2), a path or hub id of a causal LM (CheckpointFileError / "
                             "SourceNotFoundError), or a loaded model"))
def load_causal_lm(base=None):
    """A float32 ``transformers`` causal LM holding ``base``'s weights rounded to bf16, and its tokenizer.

    Weights are streamed with :func:`toolkit.open_source` (GGUF dequantised
    exactly as ``transformers`` does) into a model built from the config.
    The tokenizer is None when the checkpoint has none (training then uses
    UTF-8 bytes as token ids).
    """
    import transformers

    from toolkit.sources import open_source

    src = open_source(base, download=True)  # the whole model and its tokenizer files: downloaded, not read in place
    config = transformers.AutoConfig.for_model(**src.config)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    state = model.state_dict()
    loaded, ptrs = set(), {}
    with torch.no_grad():
        for rec in src.tensors():
            if rec.name in state:
                state[rec.name].copy_(rec.read().to(torch.bfloat16))  # start where a bf16 checkpoint starts
                loaded.add(rec.name)
    for name, t in state.items():
        ptrs.setdefault(t.data_ptr(), []).append(name)
    missing = [n for n in state if n not in loaded and not any(o in loaded for o in ptrs[state[n].data_ptr()])]
    if missing:
        raise CheckpointFileError(src.location, f"the checkpoint lacks parameters the model needs: {missing[:5]}")
    return model, _load_tokenizer(src)


def _load_tokenizer(src):
    from transformers import AutoTokenizer

    try:
        first = Path(src.files()[0])
        if src.format == "gguf":
            return AutoTokenizer.from_pretrained(first.parent, gguf_file=first.name)
        return AutoTokenizer.from_pretrained(first.parent)
    except (OSError, ValueError, TypeError, KeyError, IndexError):
        return None


def tokenize(text: str, tokenizer, vocab_size: int) -> torch.Tensor:
    """Token ids of ``text``, 1-D long; UTF-8 bytes (modulo the vocabulary) when there is no tokenizer."""
    if tokenizer is None:
        return torch.tensor([b % vocab_size for b in text.encode()], dtype=torch.long)
    return torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"], dtype=torch.long)


@checks_options(model=Exempt("a loaded transformers model (its state_dict and config are saved)"),
                tokenizer=Exempt("the model's tokenizer, saved beside it (save_pretrained)"), path=PathName(),
                info=Exempt("facts of the run, written to training_state.json as JSON"))
def save_checkpoint(model, tokenizer, path: Path, **info) -> Path:
    """Save ``model`` in bf16 (tied tensors once) + config (+ tokenizer) as a checkpoint folder, atomically
    (:func:`toolkit.atomic.atomic_dir`: a folder at ``path`` is replaced only once the new one is complete)."""
    path = Path(path)
    tensors, seen = {}, set()
    for name, t in model.state_dict().items():
        if t.data_ptr() in seen:
            continue  # a tied copy (lm_head.weight): stored once, as transformers does
        seen.add(t.data_ptr())
        tensors[name] = t.detach().to(torch.bfloat16).contiguous()
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_dir(path) as tmp:
        save_file(tensors, tmp / "model.safetensors", metadata={"format": "pt"})
        model.config.save_pretrained(tmp)
        cfg = json.loads((tmp / "config.json").read_text())
        cfg["dtype"] = "bfloat16"
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True))
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        (tmp / "training_state.json").write_text(json.dumps(info))
    return path
