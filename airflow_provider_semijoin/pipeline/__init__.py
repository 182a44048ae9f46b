"""Declarative surrogate-key pipelines: YAML / dataclass specs, validated, turned into DAGs."""

from .spec import Dimension, PipelineSpec, SurrogateKeyStep, load_pipeline

__all__ = ["Dimension", "PipelineSpec", "SurrogateKeyStep", "load_pipeline"]
