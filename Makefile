# Shortcuts; each target is one script that also works on its own.
#   make setup       system packages (as root) and the .venv with the dev extras
#   make services    OCI registry on 127.0.0.1:5000 and SeaweedFS S3 on 127.0.0.1:8333
#   make images      build the model images (no registry pulls) and push them to the registry
#   make test        the whole CI run (scripts/test.sh)
SHELL := /bin/bash
VENV := .venv/bin

.PHONY: setup services services-stop services-status images images-local test lint typecheck

setup:
	bash .ci/setup.sh

services:
	bash .ci/services.sh start

services-stop:
	bash .ci/services.sh stop

services-status:
	bash .ci/services.sh status

images: services
	bash images/build.sh

# Build the OCI layout only (no registry needed, nothing pushed).
images-local:
	bash images/build.sh --no-push

test:
	bash scripts/test.sh

lint:
	$(VENV)/ruff check app workers tests bench scripts

typecheck:
	$(VENV)/mypy
