"""The standard config keys and the one function that fills them.

Families name the same size differently (GPT-2's ``n_layer`` / ``n_embd`` /
``n_head`` / ``n_inner``, T5's ``num_layers`` / ``d_model``...), a multimodal
config keeps the language model's sizes in ``text_config``, and many configs
leave ``num_key_value_heads`` / ``head_dim`` to their defaults.
:func:`normalize_config` completes a config dict with the
:data:`STANDARD_KEYS`, so everything downstream reads one set of names:
sources call it on every config they hand out (with ``transformers``' config
class), and :class:`toolkit.architectures.Dims` reads its sizes through it
(without ``transformers``, so building an adapter imports nothing heavy).
"""

from __future__ import annotations

from collections.abc import Mapping

#: Config keys every source guarantees where the config can give them.
STANDARD_KEYS = (
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "hidden_size",
    "intermediate_size",
    "head_dim",
    "vocab_size",
    "tie_word_embeddings",
)

#: Other names families give a standard key, tried in order after the key itself.
ALIASES: dict[str, tuple[str, ...]] = {
    "num_hidden_layers": ("n_layer", "num_layers", "n_layers"),
    "hidden_size": ("n_embd", "d_model"),
    "num_attention_heads": ("n_head", "num_heads"),
    "num_key_value_heads": ("num_kv_heads",),
    "intermediate_size": ("n_inner", "ffn_dim"),
}


def text_config(config: Mapping) -> Mapping:
    """The part of ``config`` that describes the language model: its ``text_config``
    when that is a dict (a multimodal model, e.g. gemma3), else ``config`` itself."""
    text = config.get("text_config")
    return text if isinstance(text, Mapping) else config


def normalize_config(raw: Mapping, *, use_transformers: bool = True) -> dict:
    """The config dict, completed with every standard key that can be derived.

    Keeps every key of ``raw`` as it is and adds each of :data:`STANDARD_KEYS`
    that is missing (or None), from, in order:

    1. with ``use_transformers``, the ``transformers`` config class of
       ``raw["model_type"]`` (its defaults, e.g. ``num_key_value_heads =
       num_attention_heads``; its aliases; a multimodal model's text config).
       A ``model_type`` ``transformers`` does not know is skipped, and so is
       a config the class would add nothing to but the defaults known here
       (:func:`complete`: ``transformers`` is then not imported, and a
       missing ``tie_word_embeddings`` is the class's, :data:`TIED_DEFAULT`);
    2. the names of :data:`ALIASES`, in ``text_config`` first, then in ``raw``;
    3. the defaults of plain multi-head attention: ``num_key_value_heads =
       num_attention_heads``, ``head_dim = hidden_size // num_attention_heads``,
       and GPT-2's ``4 * n_embd`` when a GPT-2-style config (``n_embd``) gives
       no ``n_inner``.

    Idempotent; ``model_type`` is never added.

    Parameters
    ----------
    raw : mapping
        A ``transformers`` config as a dict (``config.json``, a GGUF's derived config).
    use_transformers : bool, default True
        Consult ``transformers``' config class (imports ``transformers``).

    Returns
    -------
    dict
        A new dict.
    """
    cfg = dict(raw)
    if use_transformers and cfg.get("model_type"):
        if not complete(cfg):
            _from_transformers(cfg)
        elif cfg.get("tie_word_embeddings") is None:  # what the class would give (complete: it is known)
            cfg["tie_word_embeddings"] = TIED_DEFAULT[cfg["model_type"]]
    text = text_config(cfg)
    for key, names in ALIASES.items():
        if cfg.get(key) is None:
            value = _first(text, (key, *names))
            if value is None and text is not cfg:
                value = _first(cfg, names)
            if value is not None:
                cfg[key] = value
    if cfg.get("head_dim") is None and text is not cfg and text.get("head_dim") is not None:
        cfg["head_dim"] = text["head_dim"]
    heads = cfg.get("num_attention_heads")
    if isinstance(heads, int) and heads > 0:
        if cfg.get("num_key_value_heads") is None:
            cfg["num_key_value_heads"] = heads
        if isinstance(cfg.get("hidden_size"), int) and cfg.get("head_dim") is None:
            cfg["head_dim"] = cfg["hidden_size"] // heads
    if cfg.get("intermediate_size") is None and "n_embd" in text and isinstance(cfg.get("hidden_size"), int):
        cfg["intermediate_size"] = 4 * cfg["hidden_size"]  # GPT2MLP: n_inner=None means 4 * n_embd
    return cfg


#: Per ``model_type``, the standard keys whose default in ``transformers``' config class is the plain one of
#: :func:`normalize_config`'s step 3 (``num_key_value_heads = num_attention_heads``, ``head_dim = hidden_size //
#: num_attention_heads``) or none at all: a config.json may leave them out and still be :func:`complete`
#: (``tests/architectures/test_config_keys.py`` checks each against the class). Not mistral's or qwen2's
#: ``num_key_value_heads``, nor gemma's ``head_dim``: their classes' defaults differ.
PLAIN_DEFAULTS: dict[str, frozenset[str]] = {
    **dict.fromkeys(("llama", "olmo", "olmo2", "granite", "smollm3", "phi", "phi3", "gpt_neox", "bert", "roberta"),
                    frozenset({"num_key_value_heads", "head_dim"})),
    **dict.fromkeys(("mistral", "qwen2"), frozenset({"head_dim"})),
    **dict.fromkeys(("gemma2", "gemma3_text"), frozenset({"num_key_value_heads"})),
}


#: Per ``model_type``, the ``tie_word_embeddings`` default of ``transformers``' config class, given to a
#: config.json that leaves it out when the class is not asked (checked against the class by the same tests).
TIED_DEFAULT: dict[str, bool] = {
    **dict.fromkeys(("bert", "roberta", "gemma2", "gemma3_text", "smollm3"), True),
    **dict.fromkeys(("llama", "mistral", "qwen2", "olmo", "olmo2", "granite", "phi", "phi3", "gpt_neox"), False),
}


def complete(config: Mapping) -> bool:
    """Whether ``transformers``' config class would add nothing to ``config`` that :func:`normalize_config`
    does not derive without it: ``config`` gives every one of :data:`STANDARD_KEYS` itself (not None), apart
    from those :data:`PLAIN_DEFAULTS` lists for its ``model_type`` and a ``tie_word_embeddings`` that
    :data:`TIED_DEFAULT` holds for it."""
    model_type = config.get("model_type")
    if not isinstance(model_type, str):
        return False
    plain = PLAIN_DEFAULTS.get(model_type, frozenset()) | ({"tie_word_embeddings"} if model_type in TIED_DEFAULT
                                                           else frozenset())
    return all(config.get(key) is not None or key in plain for key in STANDARD_KEYS)


def _first(config: Mapping, keys) -> object:
    for key in keys:
        value = config.get(key)
        if value is not None:
            return value
    return None


def _from_transformers(cfg: dict) -> None:
    """Fill the missing standard keys from ``transformers``' config class, in place."""
    try:
        from transformers import AutoConfig

        obj = AutoConfig.for_model(**cfg)
    except Exception:  # noqa: BLE001 - unknown model_type, or a config transformers refuses: keep what the file says
        return
    text = obj.get_text_config() if hasattr(obj, "get_text_config") else obj
    for key in STANDARD_KEYS:
        if cfg.get(key) is None:
            value = getattr(text, key, None)
            if value is None and text is not obj:
                value = getattr(obj, key, None)
            if value is not None:
                cfg[key] = value
