"""Small training scripts in the style people write them, each a few iterations of a tiny model."""

HEADER = """\
import torch
from torch import nn

torch.manual_seed(0)
x = torch.randn(16, 2)
y = x @ torch.tensor([[2.0], [-1.0]]) + 0.5
"""

TUTORIAL = (
    HEADER
    + """\
model = nn.Linear(2, 1)
loss_fn = nn.MSELoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

for epoch in range(5):
    optimizer.zero_grad()
    pred = model(x)
    loss = loss_fn(pred, y)
    loss.backward()
    optimizer.step()
print(f"loss {loss.item():.4f}")
"""
)

# The loop from the documentation of torch.optim (zero_grad, forward, backward, step), over a dataset.
DOCS = (
    HEADER
    + """\
model = nn.Linear(2, 1)
loss_fn = nn.MSELoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
dataset = [(x[i : i + 4], y[i : i + 4]) for i in range(0, 16, 4)]

for input, target in dataset:
    optimizer.zero_grad()
    output = model(input)
    loss = loss_fn(output, target)
    loss.backward()
    optimizer.step()
"""
)

ACCUMULATION = (
    HEADER
    + """\
model = nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
k = 4

optimizer.zero_grad()
for i in range(16):
    loss = ((model(x[i : i + 1]) - y[i : i + 1]) ** 2).mean()
    loss.backward()
    if (i + 1) % k == 0:
        optimizer.step()
        optimizer.zero_grad()
"""
)

FORGOT = (
    HEADER
    + """\
model = nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

for step in range(5):
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    optimizer.step()
"""
)

CLEARED_BEFORE_STEP = (
    HEADER
    + """\
model = nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

for step in range(5):
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    optimizer.zero_grad()
    optimizer.step()
"""
)

MODULE_ZERO_GRAD = (
    HEADER
    + """\
model = nn.Linear(2, 1, bias=False)
offset = torch.zeros(1, requires_grad=True)
optimizer = torch.optim.SGD([*model.parameters(), offset], lr=0.05)

for step in range(5):
    model.zero_grad()
    loss = ((model(x) + offset - y) ** 2).mean()
    loss.backward()
    optimizer.step()
"""
)

SET_TO_NONE_FALSE = (
    HEADER
    + """\
model = nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

for step in range(5):
    optimizer.zero_grad(set_to_none=False)
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    optimizer.step()
"""
)

GAN = """\
import torch
from torch import nn

torch.manual_seed(0)
G = nn.Linear(1, 1)
D = nn.Sequential(nn.Linear(1, 1), nn.Sigmoid())
opt_g = torch.optim.SGD(G.parameters(), lr=0.1)
opt_d = torch.optim.SGD(D.parameters(), lr=0.1)
bce = nn.BCELoss()
real = torch.randn(8, 1) + 3

for step in range(4):
    opt_d.zero_grad()
    opt_g.zero_grad()
    fake = G(torch.randn(8, 1))
    loss_d = bce(D(real), torch.ones(8, 1)) + bce(D(FAKE), torch.zeros(8, 1))
    loss_d.backward(retain_graph=True)
    opt_d.step()
    loss_g = bce(D(fake), torch.ones(8, 1))
    loss_g.backward()
    opt_g.step()
"""
GAN_NO_DETACH = GAN.replace("FAKE", "fake")
GAN_DETACH = GAN.replace("FAKE", "fake.detach()")

MANUAL_ZEROES = (
    HEADER
    + """\
W = torch.zeros(2, 1, requires_grad=True)
b = torch.zeros(1, requires_grad=True)
lr = 0.1

for step in range(5):
    loss = ((x @ W + b - y) ** 2).mean()
    loss.backward()
    with torch.no_grad():
        W -= lr * W.grad
        b -= lr * b.grad
        W.grad.zero_()
        b.grad.zero_()
"""
)

MANUAL_ZEROES_FIRST = MANUAL_ZEROES.replace(
    """        W -= lr * W.grad
        b -= lr * b.grad
        W.grad.zero_()
        b.grad.zero_()
""",
    """        W.grad.zero_()
        b.grad.zero_()
        W -= lr * W.grad
        b -= lr * b.grad
""",
)

MANUAL_NEVER_ZEROES = (
    HEADER
    + """\
W = torch.zeros(2, 1, requires_grad=True)
b = torch.zeros(1, requires_grad=True)
lr = 0.01

for step in range(5):
    loss = ((x @ W + b - y) ** 2).mean()
    loss.backward()
    with torch.no_grad():
        W -= lr * W.grad
        b -= lr * b.grad
"""
)

GRAD_IS_NONE = (
    HEADER
    + """\
W = torch.zeros(2, 1, requires_grad=True)
lr = 0.1

for step in range(5):
    loss = ((x @ W - y) ** 2).mean()
    with torch.no_grad():
        W -= lr * W.grad
    loss.backward()
"""
)

FROZEN = (
    HEADER
    + """\
model = nn.Sequential(nn.Linear(2, 4), nn.ReLU(), nn.Linear(4, 1))
unused = nn.Linear(4, 1)
optimizer = torch.optim.SGD([*model.parameters(), *unused.parameters()], lr=0.01)

for step in range(5):
    optimizer.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    optimizer.step()
"""
)

ZEROS_MOVED = (
    HEADER
    + """\
model = nn.Linear(2, 1)
head = nn.Linear(2, 1)
optimizer = torch.optim.SGD([*model.parameters(), *head.parameters()], lr=0.1, momentum=0.9)

for step in range(6):
    optimizer.zero_grad(set_to_none=False)
    use_head = step < 2
    out = head(x) if use_head else model(x)
    loss = ((out - y) ** 2).mean()
    loss.backward()
    optimizer.step()
"""
)

# The tutorial, then what it was given and its own exit status.
ARGS_AND_EXIT = (
    TUTORIAL
    + """\
import sys
print(" ".join(sys.argv[1:]))
print(__name__)
sys.exit(4)
"""
)

# The DCGAN tutorial's shape: two losses into the discriminator, zero_grad of each net before its own.
DCGAN = """\
import torch
from torch import nn

torch.manual_seed(0)
netG = nn.Linear(1, 1)
netD = nn.Sequential(nn.Linear(1, 1), nn.Sigmoid())
optG = torch.optim.Adam(netG.parameters())
optD = torch.optim.Adam(netD.parameters())
bce = nn.BCELoss()

for i in range(4):
    netD.zero_grad()
    errD_real = bce(netD(torch.randn(8, 1) + 3), torch.ones(8, 1))
    errD_real.backward()
    fake = netG(torch.randn(8, 1))
    errD_fake = bce(netD(fake.detach()), torch.zeros(8, 1))
    errD_fake.backward()
    optD.step()
    netG.zero_grad()
    errG = bce(netD(fake), torch.ones(8, 1))
    errG.backward()
    optG.step()
"""

# Mini-batches, clipping, a scheduler, model.zero_grad() after the step, evaluation under no_grad.
EPOCHS = """\
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 1))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 2)

for epoch in range(2):
    model.train()
    for xb, yb in DataLoader(data, batch_size=8, shuffle=True):
        loss = nn.functional.mse_loss(model(xb), yb)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        model.zero_grad()
    scheduler.step()
    model.eval()
    with torch.no_grad():
        model(torch.randn(4, 4))
"""

GRAD_NONE_AFTER_ZERO_GRAD = (
    HEADER
    + """\
W = torch.zeros(2, 1, requires_grad=True)
optimizer = torch.optim.SGD([W], lr=0.1)

for step in range(3):
    loss = ((x @ W - y) ** 2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    print(f"grad norm {W.grad.norm():.3f}")
"""
)

# A project's helper module: the step runs in a file of its own.
HELPERS = """\
# Training helpers kept in their own module, as projects do.
import torch


def update(model, optimizer, max_norm=1.0):
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
"""

# The script that calls it, with a layer too large to record whole (it is sampled), and no zero_grad.
SEVERAL_FILES = (
    HEADER
    + """\
from helpers import update

model = nn.Sequential(nn.Linear(2, 80), nn.Tanh(), nn.Linear(80, 80), nn.Tanh(), nn.Linear(80, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

for epoch in range(4):
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    update(model, optimizer)
"""
)

# zero_grad(set_to_none=False) between backward() and step(): the step sees zeros.
ZEROED_BEFORE_STEP = CLEARED_BEFORE_STEP.replace(
    "optimizer.zero_grad()", "optimizer.zero_grad(set_to_none=False)"
)

# Parameter groups with learning rates of their own, as fine-tuning scripts set them.
PARAM_GROUPS = (
    HEADER
    + """\
model = nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 1))
optimizer = torch.optim.SGD(
    [
        {"params": model[0].parameters(), "lr": 0.01},
        {"params": model[2].parameters()},
    ],
    lr=0.1,
    momentum=0.9,
)

for step in range(5):
    optimizer.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    optimizer.step()
"""
)
