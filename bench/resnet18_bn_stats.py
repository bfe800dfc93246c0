"""Why a few CPU steps of ResNet-18 score near chance on the test set: its weights,
or its BatchNorm running statistics?

The exercises study trains 13.6's ResNet-18 on CPUs for 2 epochs of 8 steps of 256
(studies.RESNET_CPU_STEPS), and scores it in eval mode, with BatchNorm's running
statistics, as the book's `evaluate_accuracy_gpu` does. Updated at momentum 0.1,
those statistics still hold 0.9^16 (19%) of their initial mean 0 and variance 1
after 16 steps. This benchmark trains the same 16 steps on one thread (the
1-worker trial: the first 2048 training images, lr 0.1, seed 0) and scores the
same weights on 500 test images twice: with the running statistics, and with
them re-estimated as a plain average over training batches ("precise BN", Wu
and Johnson 2021, 'Rethinking "Batch" in BatchNorm'). A gap says that the test
accuracy measures the statistics, not what the weights learned.

    python bench/resnet18_bn_stats.py
"""

import argparse
import time

import torch
from torch import nn

from common import command_line, emit
from orchestrator.config.studies import RESNET_CPU_STEPS
from orchestrator.training import data
from orchestrator.training.step import to_model_input
from orchestrator.training.models import resnet18

BATCH, LR, TEST_IMAGES = 256, 0.1, 500
# The 1-worker trial's subset: one epoch of RESNET_CPU_STEPS steps (2048 images).
TRAIN_IMAGES = RESNET_CPU_STEPS * BATCH


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=16, help="training steps (default 16)")
    parser.add_argument("--estimate-batches", type=int, default=8,
                        help="training batches the statistics are re-estimated from (default 8)")
    parser.add_argument("--no-record", action="store_true",
                        help="print the BENCH line only (a smoke run)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    images = data.load()

    def tensors(pixels, labels, count):
        x = to_model_input(torch.tensor(pixels[:count]))  # the loop's [0, 1] scaling
        return x.contiguous(memory_format=torch.channels_last), torch.tensor(labels[:count]).long()

    train_x, train_y = tensors(images.train_images, images.train_labels, TRAIN_IMAGES)
    test_x, test_y = tensors(images.test_images, images.test_labels, TEST_IMAGES)
    batches = len(train_x) // BATCH
    model = resnet18().to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    loss_fn = nn.CrossEntropyLoss()
    started, correct, seen, losses = time.perf_counter(), 0, 0, []
    for step in range(args.steps):
        index = slice((step % batches) * BATCH, (step % batches + 1) * BATCH)
        output = model(train_x[index])
        loss = loss_fn(output, train_y[index])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if step >= args.steps // 2:  # the second half's training accuracy
            correct += int((output.argmax(1) == train_y[index]).sum())
            seen += BATCH
    train_s = time.perf_counter() - started

    def test_acc() -> float:
        model.eval()
        with torch.no_grad():
            return float((model(test_x).argmax(1) == test_y).float().mean())

    running = test_acc()
    norms = [module for module in model.modules() if isinstance(module, nn.BatchNorm2d)]
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None  # a cumulative average over the batches below
    model.train()
    with torch.no_grad():
        for batch in range(min(args.estimate_batches, batches)):
            model(train_x[batch * BATCH:(batch + 1) * BATCH])
    emit("resnet18_bn_stats", command_line(), {
        "steps": args.steps, "batch": BATCH, "lr": LR, "test_images": TEST_IMAGES,
        "train_s": round(train_s, 1), "first_loss": round(losses[0], 3),
        "last_loss": round(losses[-1], 3),
        "train_acc_second_half": round(correct / seen, 3),
        "initial_stats_left": round(0.9 ** args.steps, 3),
        "test_acc_running_stats": round(running, 3),
        "test_acc_reestimated_stats": round(test_acc(), 3),
        "estimate_batches": min(args.estimate_batches, batches),
    }, append=not args.no_record)


if __name__ == "__main__":
    main()
