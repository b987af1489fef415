"""What an exercise of gradients by hand (`mlp_backward`, `attention_backward`) forbids and
watches besides its own built-ins: autograd, by every route that ends in it."""

# Autograd's Python entry points: Tensor.backward, torch.autograd.functional and the
# torch.func (functorch) transforms all end in `grad` or `backward`, forward-mode AD in
# `make_dual`. Instrumented, they record a call from any thread, by any reference.
INSTRUMENT = (
    "torch.autograd:grad",
    "torch.autograd:backward",
    "torch.autograd.forward_ad:make_dual",
)
# the names seen on the test's thread (Tensor.backward, torch.autograd.grad and every
# transform built on it, and switching gradients on)
FUNCTIONS = ("backward", "grad", "requires_grad_")
# fragments of aten op names: every backward kernel (`_softmax_backward_data`,
# `gelu_backward`, `threshold_backward`, ...)
OPS = ("_backward",)
# private torch names that count as autograd
PRIVATE = "backward|autograd|functorch|refs|decomp|prims"
# the names the source scan flags where the notebook binds them to torch's
FORBIDDEN = (
    "autograd",  # torch.autograd.* (grad, backward, functional, forward_ad)
    "func",  # torch.func.*
    "backward",
    "grad",
    "requires_grad_",
    "vjp",
    "jvp",
    "jacrev",
    "jacfwd",
    "make_dual",
)
