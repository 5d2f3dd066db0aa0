# syntax=docker/dockerfile:1
# The reins trainer worker: PyTorch and lib/trainer/worker (rank 0 serves HTTP on 8300).
#
#   docker build -f deploy/trainer.Dockerfile -t reins-trainer:0.1.0 .
#   docker build -f deploy/trainer.Dockerfile --build-arg EXTRAS=hf -t reins-trainer:0.1.0-hf .
#
# The base image carries CUDA, cuDNN and NCCL for torch.distributed on GPUs (it runs on the CPU
# too). Not built in reins' CI: the machine that wrote this has no container builder
# (tests/deploy_test.ts parses and checks it).

ARG TORCH_IMAGE=pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime
FROM ${TORCH_IMAGE}

# Optional extras of the worker package: "hf" adds transformers and safetensors.
ARG EXTRAS=""

WORKDIR /opt/reins-worker
COPY lib/trainer/worker/pyproject.toml ./
COPY lib/trainer/worker/reins_worker ./reins_worker
# torch comes from the base image; pip must not replace it with a CPU wheel.
RUN pip install --no-cache-dir --no-deps . \
 && if [ -n "$EXTRAS" ]; then pip install --no-cache-dir ".[$EXTRAS]"; fi \
 && python3 -c "import torch, reins_worker; print('torch', torch.__version__)"

RUN useradd --create-home --uid 10001 reins
USER 10001
EXPOSE 8300
# Liveness: GET /health answers 503 once a rank died (docs/scale.md).
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s \
  CMD python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8300/health', timeout=4)"
ENTRYPOINT ["python3", "-m", "reins_worker"]
CMD ["--host", "0.0.0.0", "--port", "8300"]
