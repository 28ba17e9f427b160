__version__ = "0.1.0"

# `from minbert_nb import Predictor`: resolved on first use (PEP 562), so that importing any other module of the package
# (`minbert_nb.core`, ...) does not load the training stack that the predictor needs
__all__ = ["Predictor"]

def __getattr__(name):
    if name == "Predictor":
        from .predictor import Predictor
        return Predictor
    raise AttributeError(f"module 'minbert_nb' has no attribute {name!r}")
