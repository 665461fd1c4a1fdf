//! The `autoscaling` API group.

pub mod horizontalpodautoscalers;
