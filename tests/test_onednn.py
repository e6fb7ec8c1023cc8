"""The oneDNN Linear layers of the torch engine (skbert._encoder._onednn): the plain Linear's
behaviour kept where the op alone would lose it (hooks, autocast, gradients, a failing op)."""

import logging
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from skbert import BertVectorizer, _compat
from skbert._encoder import _loading
from skbert._encoder._onednn import onednn_linears

needs_op = pytest.mark.skipif(_compat.linear_pointwise() is None,
                              reason="this torch has no oneDNN linear op")


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))


def _broken_op(calls):
    """An op that fails at call time, as oneDNN's does on inputs it has no kernel for."""
    def op(*args):
        calls.append(args)
        raise RuntimeError("could not create a primitive descriptor")
    return op


def _vectorizer(model_dir, capability, monkeypatch):
    """A fitted vectorizer on a private model (hooks stay in the test), computing every text,
    whose engine takes the oneDNN layers if ``capability`` is "AVX512"."""
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    vectorizer = BertVectorizer(model_dir, cache=False).fit()
    vectorizer.model_ = _loading.from_pretrained(model_dir, None, "float32")[0]
    _query(vectorizer)  # the engine's tree, built while the capability holds
    return vectorizer


def _query(vectorizer):
    """The first layer's query projection as the engine runs it on the CPU."""
    model = vectorizer._engine.runner(torch.device("cpu")).model
    return model.encoder.layer[0].attention.self.query


@pytest.mark.parametrize("missing", ["op", "onednn"])
def test_linear_pointwise_is_none_where_torch_has_no_such_op(monkeypatch, missing):
    if missing == "op":
        monkeypatch.setattr(torch.ops, "mkldnn", SimpleNamespace())
    else:
        monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    assert _compat.linear_pointwise() is None


def test_onednn_linears_return_the_model_itself_without_the_op(monkeypatch):
    monkeypatch.setattr(_compat, "linear_pointwise", lambda: None)
    net = _net()
    assert onednn_linears(net) is net


def test_runs_hooks_assumes_hooks_where_torch_keeps_them_under_other_names(monkeypatch):
    linear = torch.nn.Linear(2, 2)
    assert not _compat.runs_hooks(linear)
    monkeypatch.delattr(torch.nn.modules.module, "_global_forward_hooks")
    assert _compat.runs_hooks(linear)


def test_autocast_enabled_on_a_torch_whose_check_takes_no_device_type(monkeypatch):
    monkeypatch.setattr(torch, "is_autocast_enabled", lambda: False)  # torch < 2.4: CUDA's
    monkeypatch.setattr(torch, "is_autocast_cpu_enabled", lambda: True)
    assert _compat.autocast_enabled("cpu") and not _compat.autocast_enabled("cuda")


@needs_op
@pytest.mark.parametrize("registered", ["before", "after"])
@pytest.mark.parametrize("kind", ["forward", "forward_with_kwargs", "forward_pre"])
def test_hooks_on_a_linear_fire_and_change_the_output_as_on_the_plain_path(registered, kind):
    net = _net()
    x = torch.randn(5, 4)
    seen = []

    def double(module, value):
        seen.append(module)
        return value * 2

    register = {
        "forward": lambda: net[0].register_forward_hook(lambda m, args, out: double(m, out)),
        "forward_with_kwargs": lambda: net[0].register_forward_hook(
            lambda m, args, kwargs, out: double(m, out), with_kwargs=True),
        "forward_pre": lambda: net[0].register_forward_pre_hook(
            lambda m, args: (double(m, args[0]),)),
    }[kind]
    with torch.inference_mode():
        handle = register() if registered == "before" else None
        converted = onednn_linears(net)
        if handle is None:
            converted(x)  # a tree that has run already, as the engine's cached one
            handle = register()
        assert type(converted[0]).__name__ == "OneDNNLinear"
        expected = net(x)
        got = converted(x)
        handle.remove()
        unhooked = net(x)
    assert seen == [net[0], net[0]]  # the user's Linear, once per call
    torch.testing.assert_close(got, expected)
    assert not torch.allclose(got, unhooked)  # the hook changed it


@needs_op
@pytest.mark.parametrize("register", [torch.nn.modules.module.register_module_forward_hook,
                                      torch.nn.modules.module.register_module_forward_pre_hook])
def test_global_module_hooks_see_the_calls_of_the_plain_path(register):
    net = _net()
    converted = onednn_linears(net)
    x = torch.randn(5, 4)
    seen = []

    def hook(module, args, *output):
        seen.append(type(module).__name__)
        if type(module) is torch.nn.Linear:
            return output[0] * 2 if output else (args[0] * 2,)

    handle = register(hook)
    try:
        with torch.inference_mode():
            expected = net(x)
            plain, seen[:] = list(seen), []
            got = converted(x)
    finally:
        handle.remove()
    assert seen == plain and len(plain) == 4  # each module once, the converted ones too
    torch.testing.assert_close(got, expected)


@needs_op
@pytest.mark.parametrize("x_requires_grad", [True, False])
def test_gradients_through_converted_linears_equal_the_plain_ones(x_requires_grad):
    net = _net()
    converted = onednn_linears(net)
    x = torch.randn(5, 4, requires_grad=x_requires_grad)
    grads = []
    for model in (net, converted):
        x.grad = None
        net.zero_grad()
        model(x).square().sum().backward()
        grads.append([x.grad, net[0].weight.grad, net[2].bias.grad])
    (x_grad, *expected), (got_x_grad, *got) = grads
    torch.testing.assert_close(got_x_grad, x_grad)
    for gradient, reference in zip(got, expected):
        torch.testing.assert_close(gradient, reference)
        assert reference is not None


@needs_op
def test_cpu_autocast_computes_as_the_plain_linear_does():
    net = _net()
    converted = onednn_linears(net)
    x = torch.randn(5, 4)
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        expected = net(x)
        got = converted(x)
    assert got.dtype == expected.dtype == torch.bfloat16
    torch.testing.assert_close(got, expected)
    assert converted[0].fallback.reason is None  # taken by design, not after a failure


def test_a_failing_op_leaves_the_tree_to_the_plain_linear_once_with_its_reason(monkeypatch,
                                                                             caplog):
    calls = []
    monkeypatch.setattr(_compat, "linear_pointwise", lambda: _broken_op(calls))
    net = _net()
    converted = onednn_linears(net)
    x = torch.randn(5, 4)
    with torch.inference_mode(), caplog.at_level(logging.DEBUG, logger="skbert"):
        got = [converted(x), converted(x)]
        expected = net(x)
    assert len(calls) == 1  # neither the second layer nor the second call tries it again
    for output in got:
        torch.testing.assert_close(output, expected, rtol=0, atol=0)
    reason = "RuntimeError: could not create a primitive descriptor"
    assert converted[0].fallback.reason == converted[2].fallback.reason == reason
    assert [record.getMessage() for record in caplog.records] == [
        f"oneDNN's linear op failed ({reason}): this model's Linear layers run torch's "
        "own Linear from now on"]
    assert onednn_linears(net)[0].fallback.reason is None  # another tree tries it afresh


def test_an_input_at_fault_raises_the_plain_linears_error_and_keeps_the_op(monkeypatch):
    monkeypatch.setattr(_compat, "linear_pointwise", lambda: _broken_op([]))
    converted = onednn_linears(_net())
    with torch.inference_mode(), pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        converted(torch.randn(5, 7))
    assert converted[0].fallback.reason is None


def test_a_vectorizer_whose_op_fails_gives_the_plain_paths_features(tiny_model_dir, texts,
                                                                   monkeypatch):
    expected = _vectorizer(tiny_model_dir, "AVX2", monkeypatch).transform(texts)
    monkeypatch.setattr(_compat, "linear_pointwise", lambda: _broken_op([]))
    vectorizer = _vectorizer(tiny_model_dir, "AVX512", monkeypatch)
    got = vectorizer.transform(texts)
    assert _query(vectorizer).fallback.reason.startswith("RuntimeError: could not create")
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)


@needs_op
def test_a_vectorizer_transforms_under_cpu_autocast_as_the_plain_path(tiny_model_dir, texts,
                                                                      monkeypatch):
    plain = _vectorizer(tiny_model_dir, "AVX2", monkeypatch)
    onednn = _vectorizer(tiny_model_dir, "AVX512", monkeypatch)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected, got = plain.transform(texts), onednn.transform(texts)
    assert type(_query(onednn)).__name__ == "OneDNNLinear"
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)


@needs_op
def test_a_vectorizer_runs_the_hooks_of_its_linear_layers_as_the_plain_path(tiny_model_dir,
                                                                          texts, monkeypatch):
    def run(capability, scale):
        vectorizer = _vectorizer(tiny_model_dir, capability, monkeypatch)
        vectorizer.transform(texts)  # the engine's tree built (and cached) before the hook
        calls = []

        def hook(module, args, output):
            calls.append(module)
            return output * scale

        query = vectorizer.model_.encoder.layer[0].attention.self.query
        query.register_forward_hook(hook)
        assert type(_query(vectorizer)).__name__ == (
            "OneDNNLinear" if capability == "AVX512" else "Linear")
        return vectorizer.transform(texts), calls

    features = {}
    for scale in (1.0, 50.0):
        expected, plain_calls = run("AVX2", scale)
        features[scale], calls = run("AVX512", scale)
        assert len(calls) == len(plain_calls) > 0
        np.testing.assert_allclose(features[scale], expected, rtol=0, atol=1e-5)
    assert not np.allclose(features[1.0], features[50.0], atol=1e-3)  # the hook changed them


@needs_op
def test_a_vectorizer_without_hooks_runs_every_linear_on_the_op(tiny_model_dir, texts,
                                                                monkeypatch):
    op, calls = _compat.linear_pointwise(), []

    def counted(*args):
        calls.append(args)
        return op(*args)

    monkeypatch.setattr(_compat, "linear_pointwise", lambda: counted)
    _vectorizer(tiny_model_dir, "AVX512", monkeypatch).transform(texts)
    plain, linear_calls = _vectorizer(tiny_model_dir, "AVX2", monkeypatch), []
    for module in plain.model_.modules():
        if type(module) is torch.nn.Linear:
            module.register_forward_hook(lambda *args: linear_calls.append(args))
    plain.transform(texts)
    assert len(calls) == len(linear_calls) > 0
