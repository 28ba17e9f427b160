__version__ = "0.1.0"

# The main names, importable from the package itself (`from minbert_nb import TrainConfig, MultitaskBert, load_run`, as
# `from transformers import BertModel`). Each is resolved on first use (PEP 562), so that importing one module of the
# package (`minbert_nb.core`, ...) does not load the training stack. (`train` and `evaluate` are not here: they are also the
# names of modules, which Python puts on the package once imported; import them from their modules.)
_HOMES = {
    "BertModel": "bert", "BertConfig": "bert", "MPNetModel": "bert", "MPNetConfig": "bert",
    "load_bert": "pretrained", "load_tokenizer": "pretrained",
    "MultitaskBert": "multitask", "ModelConfig": "multitask", "fake_batch": "multitask",
    "PeftConfig": "peft", "inject_peft": "peft", "AdamW": "optimizer",
    "TrainStep": "step", "StepContext": "step", "SmartTerm": "smart", "PCGradGrads": "pcgrad",
    "TrainConfig": "config", "PRESETS": "config", "preset_config": "config", "build_data": "run_data",
    "Run": "train", "load_run": "train", "score_dev": "train", "train_phases": "phases", "run_training": "phases",
    "overall_score": "evaluate", "Predictor": "predictor", "export_run": "export",
}
__all__ = list(_HOMES)

def __getattr__(name):
    if name in _HOMES:
        import importlib
        return getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
    raise AttributeError(f"module 'minbert_nb' has no attribute {name!r}")
