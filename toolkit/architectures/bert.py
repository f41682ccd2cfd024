"""BERT-style encoders: separate query/key/value, no gate.

From ``transformers`` 5 ``modeling_bert.py`` / ``modeling_roberta.py``:
``bert.encoder.layer.{i}.attention.self.{query,key,value}``,
``attention.output.dense`` (output projection), ``intermediate.dense`` (up)
and ``output.dense`` (down), all ``nn.Linear``. ``BertModel`` checkpoints
have no ``bert.`` prefix (sentence-transformers models), ``BertFor*`` ones do.
The pooler and the MLM head (``cls.predictions.transform.dense``) are no
components; nor is cross-attention (``crossattention.self.query``).
"""

from __future__ import annotations

from toolkit.architectures.adapter import FamilyAdapter, register_architecture

BERT_MODULES = {
    "attention.self.query": "attn.q",
    "attention.self.key": "attn.k",
    "attention.self.value": "attn.v",
    "attention.output.dense": "attn.o",
    "intermediate.dense": "mlp.up",
    "output.dense": "mlp.down",
}


@register_architecture("bert")
class BertAdapter(FamilyAdapter):
    """BERT (and sentence-transformers models built on it)."""

    prefixes = ("bert.", "")
    layers = "encoder.layer"
    modules = BERT_MODULES


@register_architecture("roberta", "xlm-roberta")
class RobertaAdapter(FamilyAdapter):
    """RoBERTa, XLM-RoBERTa."""

    prefixes = ("roberta.", "")
    layers = "encoder.layer"
    modules = BERT_MODULES
