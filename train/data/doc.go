// Package data holds the training data side of gorun: MNIST-format (IDX)
// and CIFAR-10 binary readers, synthetic datasets and their writers,
// normalisation and seeded augmentation, the distributed sampler, and a
// loader that prepares batches while the model trains.
package data
