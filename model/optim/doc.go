// Package optim holds the optimizers (torch.optim.SGD, Adam, Adadelta) and
// learning-rate schedules (StepLR, CosineAnnealingLR) with PyTorch's
// arithmetic. The updates run on the model's backend.
package optim
