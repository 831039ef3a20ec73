"""TM209: a misspelt ``requires_grad`` assigned (a new attribute, nothing frozen) or called."""


def test_freezing_a_backbone_with_the_misspelt_flag(lint):
    source = """
        import torch

        for name, param in model.encoder.named_parameters():
            param.require_grad = False
        model.classifier.weight.require_grad = True
        trainable = [p for p in model.parameters() if p.requires_grad]
    """
    [(first, frozen), (second, unfrozen)] = lint(source, "TM209")
    assert (first, second) == (5, 6)
    assert "`param` keeps its flag: a parameter is not frozen" in frozen
    assert "`model.classifier.weight` is not made trainable" in unfrozen
    assert frozen.startswith("`.require_grad` is not the flag autograd reads")


def test_other_misspellings_and_shapes_of_assignment(lines):
    source = """
        for p in layer.parameters():
            p.requires_grads = False
        emb.weight.requires_grad_ = False
        w.require_grad: bool = flag
        a.require_grad, b.requires_grad = False, False
        setattr(head.bias, "require_grad", False)
    """
    assert lines(source, "TM209") == [3, 4, 5, 6, 7]


def test_a_misspelt_in_place_method_raises_later(lint):
    source = """
        for epoch in range(epochs):
            if epoch == unfreeze_at:
                model.backbone.require_grad_(True)
            train_one_epoch(model, loader)
    """
    [(line, message)] = lint(source, "TM209")
    assert line == 4
    assert "raises AttributeError when it runs" in message and "`requires_grad_()`" in message


def test_the_right_spelling_and_plain_variables_are_not_flagged(lines):
    source = """
        import torch

        require_grad = False
        x = torch.zeros(3)
        x.requires_grad = require_grad
        x.requires_grad_(True)
        model.requires_grad_(False)
        setattr(x, "requires_grad", True)
        config = dict(require_grad=True)
    """
    assert lines(source, "TM209") == []


def test_an_attribute_of_the_users_own_class_is_not_a_typo(lines):
    source = """
        from torch import nn

        class Adapter(nn.Module):
            def __init__(self, dim, require_grad=True):
                super().__init__()
                self.proj = nn.Linear(dim, dim)
                self.require_grad = require_grad

        cfg.require_grad = args.finetune
        if cfg.require_grad:
            adapter.proj.requires_grad_(True)

        class Block:
            def require_grad_(self, flag):
                self.flag = flag

        block.require_grad_(False)
    """
    assert lines(source, "TM209") == []
