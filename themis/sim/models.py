"""Model catalogue: job types -> category and placement class (compute- vs
network-intensive, paper Table 1 and section 3.1.2).

Table 1 measures only VGG16 (network-intensive: 103.6 -> 80.4 images/s across servers) and
Inception-v3 (compute-intensive: unchanged). Other models are classed by the same cause
the paper gives - "very large number of parameters [that] incur greater overheads for
updating gradients over the network": models dominated by large dense layers or
embeddings are network-intensive, convolution-heavy models with few parameters per FLOP
are compute-intensive. The tables are the documented mapping (docs/simulator.md).
"""

from __future__ import annotations

# Philly/Gavel trace job types (model family = text before " (batch size").
TRACE_CLASSES: dict[str, tuple[str, str]] = {
    "ResNet-18": ("CV", "compute"),  # convolutional, 11M params
    "ResNet-50": ("CV", "compute"),  # convolutional, 25M params, like Inception-v3
    "CycleGAN": ("CV", "compute"),  # convolutional generators
    "A3C": ("RL", "compute"),  # small policy network, CPU-bound simulation
    "Transformer": ("NLP", "network"),  # large embeddings + dense attention layers
    "LM": ("NLP", "network"),  # LSTM LM with a large softmax/embedding
    "Recommendation": ("Rec", "network"),  # embedding tables dominate
}

# Paper Table 4 (synthetic workloads): category share, then (model, class, serial s/iter).
TABLE4: dict[str, tuple[float, tuple[tuple[str, str, float], ...]]] = {
    "CV": (
        0.10,
        (
            ("Inception-v3", "compute", 0.60),
            ("AlexNet", "network", 0.20),
            ("ResNet50", "compute", 0.40),
            ("VGG16", "network", 0.50),
            ("VGG19", "network", 0.60),
        ),
    ),
    "NLP": (
        0.60,
        (
            ("Bi-Att-Flow", "compute", 0.30),
            ("LangModel", "network", 0.20),
            ("GNMT", "network", 0.40),
            ("Transformer", "network", 0.35),
        ),
    ),
    "Speech": (
        0.30,
        (
            ("WaveNet", "compute", 0.80),
            ("DeepSpeech", "compute", 0.50),
        ),
    ),
}


def trace_family(job_type: str) -> str:
    return job_type.split(" (", 1)[0].strip()


def trace_class(job_type: str) -> str:
    fam = trace_family(job_type)
    if fam not in TRACE_CLASSES:
        raise KeyError(fam)
    return TRACE_CLASSES[fam][1]
