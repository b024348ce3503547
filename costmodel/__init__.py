"""parplan's cost model: specs, operator decomposition, predictors and step-time composition."""
