"Metrics equal scipy / sklearn on fixtures; prediction files round-trip"
import numpy as np, pandas as pd, pytest, torch
from scipy.stats import pearsonr
from minbert_nb.evaluate import accuracy, pearson, overall_score, score_split, evaluate, write_predictions, read_predictions, prediction_path

import sklearn.metrics as sk

@pytest.mark.parametrize("seed", range(5))
def test_metrics_match_oracles(seed):
    rng = np.random.default_rng(seed)
    y, p = rng.integers(0, 5, 500), rng.integers(0, 5, 500)
    assert accuracy(p, y) == pytest.approx(sk.accuracy_score(y, p), abs=1e-15)
    a, b = rng.normal(size=300), rng.normal(size=300)
    b = 0.6 * a + b
    assert pearson(a, b) == pytest.approx(pearsonr(a, b)[0], abs=1e-12)

def test_overall_formula():
    assert overall_score(0.5, 0.75, 0.5) == pytest.approx((0.5 + 0.75 + 0.75) / 3)
    assert overall_score(1, 1, 1) == 1 and overall_score(0, 0, -1) == 0

def test_bad_metric_inputs():
    with pytest.raises(ValueError, match="equal"): accuracy([1, 2], [1])
    with pytest.raises(ValueError): pearson([1.0], [1.0])

class _Const(torch.nn.Module):
    "A fake model: predicts the batch's labels for SST, a constant for the rest"
    def __init__(self): super().__init__(); self.w = torch.nn.Parameter(torch.zeros(1))
    def predict(self, b):
        if b["task"] == "sst": return b["labels"]
        if b["task"] == "para": return torch.ones(len(b["ids"]), dtype=torch.long)
        return b["labels"] * 2 + 1

def test_evaluate_combines_tasks():
    def dl(task, labels):
        return [dict(task=task, ids=[str(i) for i in range(len(labels))], labels=torch.tensor(labels))]
    m, preds = evaluate(_Const(), {"sst": dl("sst", [0, 1, 4]), "para": dl("para", [1, 0, 1, 1]), "sts": dl("sts", [0.5, 2.0, 4.5])}, "cpu")
    assert m["sst_acc"] == 1.0 and m["para_acc"] == 0.75 and m["sts_corr"] == pytest.approx(1.0)
    assert m["overall"] == pytest.approx((1 + 0.75 + 1) / 3)
    assert list(preds["para"].columns) == ["id", "pred", "label"]

def test_unlabelled_rows_are_counted_not_scored():
    df = pd.DataFrame({"id": list("abcd"), "pred": [1, 0, 1, 1], "label": [1, 0, np.nan, np.nan]})
    s = score_split("para", df)
    assert s == {"n": 2, "n_unlabelled": 2, "para_acc": 1.0}

def test_prediction_files_roundtrip(tmp_path):
    for task, preds in [("sst", [0, 4, 2]), ("para", [1, 0, 1]), ("sts", [0.0, 2.5, 4.75])]:
        p = write_predictions(pd.DataFrame({"id": ["x", "y", "z"], "pred": preds}), task, prediction_path(tmp_path, task, "dev"))
        assert p.name == f"{task}-dev-output.csv"
        back = read_predictions(p, task)
        assert back.id.tolist() == ["x", "y", "z"] and back.pred.tolist() == pytest.approx(preds)
    bad = tmp_path / "bad.csv"; bad.write_text("id \t Predicted_Sentiment \nx , 1 \ny , one \n")
    with pytest.raises(ValueError, match="bad.csv:3"): read_predictions(bad, "sst")
