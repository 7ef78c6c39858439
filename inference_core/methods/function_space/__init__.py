"""Function-space methods: f-POVI (`fsvgd`, `fwsgld`, `fpisgld`; Wang et al. 2019)."""

from inference_core.methods.function_space.fpovi import FSVGD, FWSGLD, FPiSGLD, FunctionSpacePOVI

__all__ = ["FPiSGLD", "FSVGD", "FWSGLD", "FunctionSpacePOVI"]
