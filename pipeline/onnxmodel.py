"""The ONNX embedding backends: a sentence-transformers model exported locally to ONNX (optionally int8), run
by onnxruntime with the model's own tokenizer and mean pooling, so vectors match the torch backend's."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

import numpy as np

from pipeline.errors import DriftwatchError

log = logging.getLogger(__name__)

ENV_CACHE = "DRIFTWATCH_CACHE"  # where exported models are kept (default ~/.cache/driftwatch)
OPSET = 17
EXPORT_VERSION = 3  # of the export and quantisation recipe below: a new recipe exports anew


class OnnxModelError(DriftwatchError):
    """A model the ONNX backend cannot export or run; the message names the model and why."""


def cache_root() -> Path:
    return Path(os.environ.get(ENV_CACHE) or Path.home() / ".cache" / "driftwatch").expanduser()


def model_digest(folder: Path) -> str:
    """A short hash of the files that decide the vectors: the weights, the model and tokenizer configs."""
    h = hashlib.sha256()
    for name in ("config.json", "model.safetensors", "pytorch_model.bin", "tokenizer.json", "vocab.txt",
                 "sentence_bert_config.json", "modules.json", "1_Pooling/config.json"):
        path = folder / name
        if path.is_file():
            h.update(name.encode())
            with path.open("rb") as f:
                while block := f.read(1 << 20):
                    h.update(block)
    return h.hexdigest()[:16]


def _modules(folder: Path) -> list[str]:
    path = folder / "modules.json"
    if not path.is_file():
        return ["sentence_transformers.models.Transformer", "sentence_transformers.models.Pooling"]
    return [m["type"] for m in json.loads(path.read_text(encoding="utf-8"))]


def check_pooling(folder: Path, name: str) -> None:
    """Only what this backend reproduces: a transformer, mean pooling, optionally a Normalize module."""
    supported = {"sentence_transformers.models.Transformer", "sentence_transformers.models.Pooling",
                 "sentence_transformers.models.Normalize"}
    other = [m for m in _modules(folder) if m not in supported]
    if other:
        raise OnnxModelError(f"embedding model {name!r}: module {other[0]} is not supported by the ONNX backend "
                             "(use embedder.backend = \"torch\")")
    for pooling in folder.glob("*_Pooling/config.json"):
        modes = {k for k, v in json.loads(pooling.read_text(encoding="utf-8")).items()
                 if k.startswith("pooling_mode") and v}
        if modes != {"pooling_mode_mean_tokens"}:
            raise OnnxModelError(f"embedding model {name!r}: pooling {sorted(modes)} is not supported by the ONNX "
                                 "backend, only mean pooling (use embedder.backend = \"torch\")")


def export(folder: Path, out: Path) -> None:
    """torch.onnx.export of the model's transformer (last hidden state), dynamic batch and sequence axes."""
    import torch
    from transformers import AutoModel

    # Eager attention exports as plain MatMul/Softmax, which onnxruntime's optimizer fuses (sdpa does not fuse).
    model = AutoModel.from_pretrained(str(folder), attn_implementation="eager").eval()
    takes_types = "token_type_ids" in model.forward.__code__.co_varnames
    names = ["input_ids", "attention_mask", "token_type_ids"] if takes_types else ["input_ids", "attention_mask"]

    class Hidden(torch.nn.Module):  # positional inputs, one output: what the exporter traces cleanly
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *inputs):
            return self.model(**dict(zip(names, inputs))).last_hidden_state

    sample = tuple(torch.ones((2, 8), dtype=torch.int64) for _ in names)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    with torch.no_grad():
        torch.onnx.export(Hidden().eval(), sample, str(tmp), input_names=names, output_names=["last_hidden_state"],
                          dynamic_axes={n: {0: "batch", 1: "sequence"} for n in [*names, "last_hidden_state"]},
                          opset_version=OPSET, dynamo=False)
    _fuse(tmp, model.config)
    os.replace(tmp, out)


def _fuse(path: Path, config) -> None:
    """onnxruntime's transformer optimizer in place (fused attention, layer norms, GELU) for BERT-like models;
    other architectures keep the plain graph, which onnxruntime still optimises at load time."""
    if getattr(config, "model_type", "") not in ("bert", "roberta", "xlm-roberta", "distilbert", "mpnet"):
        return
    from onnxruntime.transformers.optimizer import optimize_model

    optimized = optimize_model(str(path), model_type="bert", num_heads=config.num_attention_heads,
                               hidden_size=config.hidden_size)
    optimized.save_model_to_file(str(path))


def quantize(model: Path, out: Path) -> None:
    """onnxruntime's dynamic int8 quantisation of the weights (activations quantised at run time), one scale per
    output channel, of the MatMuls and the fused attention only: per-tensor scales (the earlier recipe) left a
    mean cosine of 0.950 to the torch vectors on the demo's chunks, per-channel 0.993 at the same speed, and the
    token embeddings, which cost nothing to compute, stay float."""
    from onnx import TensorProto
    from onnxruntime.quantization import QuantType, quantize_dynamic

    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    # The fused operators (com.microsoft domain) escape ONNX's shape inference: their outputs are float.
    quantize_dynamic(str(model), str(tmp), weight_type=QuantType.QInt8, per_channel=True,
                     op_types_to_quantize=["MatMul", "Attention"],
                     extra_options={"DefaultTensorType": TensorProto.FLOAT})
    os.replace(tmp, out)


def exported(folder: Path, name: str, int8: bool, cache: Path | None = None) -> Path:
    """The ONNX file of the model in `folder`, exported (and quantised) on first use into the cache, under
    a folder keyed by the model's path and the hash of its files."""
    check_pooling(folder, name)
    key = (hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:8] + "-" + model_digest(folder)
           + f"-v{EXPORT_VERSION}")
    base = (cache or cache_root()) / "onnx" / f"{folder.name}-{key}"
    fp32 = base / "model.onnx"
    if not fp32.is_file():
        log.info("exporting %s to ONNX in %s", name, base)
        try:
            export(folder, fp32)
        except Exception as exc:  # torch's exporter raises many kinds
            raise OnnxModelError(f"cannot export embedding model {name!r} to ONNX: {exc}") from exc
    if not int8:
        return fp32
    q8 = base / "model-int8.onnx"
    if not q8.is_file():
        quantize(fp32, q8)
    return q8


class OnnxEncoder:
    """Tokenize, run the exported transformer, mean-pool over the attention mask (sentence-transformers'
    Pooling), batch by batch in order of length as sentence-transformers does."""

    def __init__(self, folder: Path, name: str, int8: bool = False, threads: int | None = None,
                 cache: Path | None = None) -> None:
        import onnxruntime
        from transformers import AutoTokenizer

        self.path = exported(folder, name, int8, cache)
        options = onnxruntime.SessionOptions()
        # Idle threads sleep instead of spinning: on a CPU shared with other work spinning costs more than it saves.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if threads:
            options.intra_op_num_threads = threads
        self.session = onnxruntime.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        config = folder / "sentence_bert_config.json"
        settings = json.loads(config.read_text(encoding="utf-8")) if config.is_file() else {}
        self.max_length = int(settings.get("max_seq_length") or min(self.tokenizer.model_max_length, 512))
        self.lower = bool(settings.get("do_lower_case", False))

    def dimension(self) -> int:
        return int(self.session.get_outputs()[0].shape[-1])

    def encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        """Mean-pooled float32 vectors (not normalised), one row per text, in the texts' order."""
        order = np.argsort([-len(t) for t in texts], kind="stable")
        out: list[np.ndarray] = [None] * len(texts)  # type: ignore[list-item]
        for start in range(0, len(texts), batch_size):
            batch = [texts[i] for i in order[start:start + batch_size]]
            if self.lower:
                batch = [t.lower() for t in batch]
            tokens = self.tokenizer(batch, padding=True, truncation=True, max_length=self.max_length,
                                    return_tensors="np")
            feed = {n: tokens[n].astype(np.int64) for n in self.inputs if n in tokens}
            if "token_type_ids" in self.inputs and "token_type_ids" not in feed:  # the fused graph may drop it
                feed["token_type_ids"] = np.zeros_like(feed["input_ids"])
            hidden = self.session.run(None, feed)[0]
            mask = tokens["attention_mask"].astype(np.float32)[:, :, None]
            pooled = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
            for i, row in zip(order[start:start + batch_size], pooled):
                out[i] = row.astype(np.float32)
        return np.stack(out) if out else np.zeros((0, 0), np.float32)
