# One image for the API and the workers.
#   docker build -t parvis .                                  (CPU torch)
#   docker build --build-arg TORCH_INDEX=cu128 -t parvis:gpu . (CUDA torch, for GPU workers)
FROM python:3.11-slim

ARG TORCH_INDEX=cpu
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PARVIS_DATA_DIR=/var/lib/parvis

RUN useradd --create-home --uid 10001 parvis && mkdir -p /var/lib/parvis && chown parvis /var/lib/parvis
WORKDIR /opt/parvis

RUN pip install "torch==2.13.0" --index-url "https://download.pytorch.org/whl/${TORCH_INDEX}"
COPY pyproject.toml README.md alembic.ini ./
COPY app ./app
COPY workers ./workers
COPY inference_core ./inference_core
COPY service ./service
COPY parvis ./parvis
RUN pip install .

USER parvis
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/v1/health/live')"
CMD ["parvis", "api", "--host", "0.0.0.0", "--port", "8000"]
