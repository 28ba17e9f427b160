"""sentence-transformers' own STS-B recipe on the embedded MiniLM, as the specialist that minbert_nb's multitask STS is held against.

The recipe of sentence-transformers' `training_stsbenchmark.py`: CosineSimilarityLoss (cosine of the two mean-pooled vectors
regressed onto score / 5), 4 epochs, batch 16, AdamW lr 2e-5, weight decay 0.01, 10% linear warmup, fp32. It trains on the
same STS training file minbert_nb uses and writes a run folder like `minbert_train` does: config.json, metrics.json (dev
Pearson r), history.csv and predictions/sts-{dev,test}-output.csv (the CS224N format). Needs `pip install sentence-transformers`
(a development extra; minbert_nb does not depend on it).

    python tools/st_recipe.py --out results/st-recipe [--data_dir DIR] [--epochs 4] [--threads 2]
"""
import argparse, json, math, time
from pathlib import Path
import numpy as np, pandas as pd, torch
from scipy.stats import pearsonr


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True); p.add_argument("--data_dir", default=None)
    p.add_argument("--epochs", type=int, default=4); p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--lr", type=float, default=2e-5); p.add_argument("--seed", type=int, default=11711)
    p.add_argument("--threads", type=int, default=2); p.add_argument("--limit", type=int, default=None, help="training pairs (smoke tests)")
    a = p.parse_args(argv)
    from sentence_transformers import SentenceTransformer, InputExample, losses
    from torch.utils.data import DataLoader
    from minbert_nb.core import set_seed
    from minbert_nb.data import load_split, find_data_dir
    from minbert_nb.pretrained import resolve_checkpoint
    from minbert_nb.evaluate import write_predictions
    from minbert_nb.core import code_version
    torch.set_num_threads(a.threads); set_seed(a.seed)
    out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    model = SentenceTransformer(str(resolve_checkpoint(None)), device="cpu")
    train = load_split("sts", "train", a.data_dir)
    if a.limit: train = train.head(a.limit)
    ex = [InputExample(texts=[s1, s2], label=float(y) / 5.0) for s1, s2, y in zip(train.sentence1, train.sentence2, train.label)]
    dl = DataLoader(ex, shuffle=True, batch_size=a.batch_size)
    loss = losses.CosineSimilarityLoss(model)
    warmup = math.ceil(len(dl) * a.epochs * 0.1)
    cfg = dict(recipe="sentence-transformers training_stsbenchmark.py (old_fit)", model="all-MiniLM-L6-v2 (embedded)",
               loss="CosineSimilarityLoss", epochs=a.epochs, batch_size=a.batch_size, lr=a.lr, weight_decay=0.01, warmup_steps=warmup,
               scheduler="WarmupLinear", threads=a.threads, seed=a.seed, train_rows=len(train), data_dir=str(find_data_dir(a.data_dir)))
    (out/"config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    hist = []
    def score(split):
        df = load_split("sts", split, a.data_dir)
        u = model.encode(list(df.sentence1), batch_size=128, convert_to_tensor=True, show_progress_bar=False)
        v = model.encode(list(df.sentence2), batch_size=128, convert_to_tensor=True, show_progress_bar=False)
        cos = torch.nn.functional.cosine_similarity(u, v).cpu().numpy()
        return df, cos
    model.old_fit(train_objectives=[(dl, loss)], epochs=a.epochs, warmup_steps=warmup, optimizer_params={"lr": a.lr},
                  weight_decay=0.01, show_progress_bar=True)
    train_s = time.time() - t0
    dev, cos = score("dev")
    r = float(pearsonr(np.clip(cos * 5, 0, 5), dev.label.astype(float))[0])   # the written predictions, as CS224N scores them
    r_cos = float(pearsonr(cos, dev.label.astype(float))[0])
    pred_dir = out/"predictions"; pred_dir.mkdir(exist_ok=True)
    write_predictions(pd.DataFrame(dict(id=dev.id, pred=np.clip(cos * 5, 0, 5))), "sts", pred_dir/"sts-dev-output.csv")
    try:
        test, tcos = score("test")
        write_predictions(pd.DataFrame(dict(id=test.id, pred=np.clip(tcos * 5, 0, 5))), "sts", pred_dir/"sts-test-output.csv")
    except FileNotFoundError as e: print(f"no test predictions: {e}")
    hist.append(dict(epoch=a.epochs, sts_corr=r, train_time_s=train_s))
    pd.DataFrame(hist).to_csv(out/"history.csv", index=False)
    m = dict(sts_corr=r, sts_corr_unclipped_cosine=r_cos, sts_n=len(dev), split="dev", wall_time_s=time.time() - t0, train_time_s=train_s, device="cpu",
             threads=a.threads, code=code_version(), **{k: cfg[k] for k in ("recipe", "loss", "epochs", "batch_size", "lr")})
    (out/"metrics.json").write_text(json.dumps(m, indent=2) + "\n")
    print(f"sentence-transformers STS-B recipe: dev r={r:.4f} | {m['wall_time_s']:.0f}s | {out}")
    return m


if __name__ == "__main__": main()
