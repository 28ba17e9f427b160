"`torch.compile` traces the training forward whole: no graph break in the plain model or in any PEFT model (on CPU)"
import pytest, torch
import torch._dynamo as dynamo
from minbert_nb.config import preset_config
from minbert_nb.multitask import MultitaskBert, fake_batch
from datapaths import tiny_backbone_dir

def _explain(peft, task):
    cfg = preset_config("quick", backbone=tiny_backbone_dir(), peft=peft, out="unused").model_config()
    torch.manual_seed(0)
    model = MultitaskBert(cfg).train()
    model.bert.unpad = False                      # as `compile_forward` sets it: packing gives data-dependent shapes
    batch = fake_batch(task, B=4, T=12, vocab=cfg.bert.vocab_size if hasattr(cfg, "bert") else 100, pair_mode=cfg.mode_of(task))
    dynamo.reset()
    return dynamo.explain(model)(batch)

@pytest.mark.parametrize("peft,task", [("none", "sst"), ("none", "para"), ("none", "sts"),
                                       *[(p, "sts") for p in ("pal", "prefix", "adapter", "lora", "dora")]])
def test_one_graph_no_breaks(peft, task):
    ex = _explain(peft, task)
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), f"{peft}, {task}: {ex.graph_count} graphs, breaks: {ex.break_reasons}"
