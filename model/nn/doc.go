// Package nn holds the layers: each computes its forward pass, and its
// backward pass from the gradient of its output, through a tensor.Backend.
//
// Layers follow PyTorch's semantics and defaults, and name their parameters
// and buffers as torch.nn does, so a model's State matches the state_dict of
// the same PyTorch model key for key. Parameter gradients accumulate across
// Backward calls until ZeroGrad, as in PyTorch.
//
// Every layer answers for itself: Layer's methods cover what the trainer,
// pipelines, DDP and checkpoints need (forward, backward, state, mode, and a
// replica for pipeline microbatches), and a layer made of other layers also
// implements Container. Nothing in this package lists the layer types, so a
// layer defined in another package works everywhere a built-in one does.
// One file per layer kind: conv.go, linear.go, batchnorm.go, relu.go,
// pool.go, dropout.go, flatten.go, logsoftmax.go, chain.go, residual.go,
// checkpoint.go; loss.go holds the criteria, state.go saving and loading.
//
// Memory (buffers.go): a layer keeps what its backward needs, but the
// gradients flowing backward, and with gradients off (SetGradEnabled) the
// outputs flowing forward, live only until the next layer has read them,
// so containers lend them from one pool of buffers per network. ReLUs
// after batch norms and the residual sums work in place, as torchvision's
// do, and Checkpoint recomputes a block's activations in backward instead
// of keeping them.
package nn
