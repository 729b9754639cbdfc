//! Validation errors that name the field they are about, so a user can fix every problem in one
//! pass instead of one per submission.

use std::fmt;

use serde::{Deserialize, Serialize};

/// One problem with one field of user input, e.g. `gpus: must be at least 1`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldError {
    /// Path of the field, dotted and indexed: `replicas.min`, `regions[2]`.
    pub field: String,
    /// What is wrong, phrased so that the fix is obvious.
    pub problem: String,
}

impl FieldError {
    /// A problem with `field`.
    pub fn new(field: impl Into<String>, problem: impl Into<String>) -> Self {
        FieldError { field: field.into(), problem: problem.into() }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}", self.problem)
        } else {
            write!(f, "{}: {}", self.field, self.problem)
        }
    }
}

/// Every problem found in one piece of input; never empty when returned as an error.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct FieldErrors(pub Vec<FieldError>);

impl FieldErrors {
    /// Records a problem.
    pub fn push(&mut self, field: impl Into<String>, problem: impl Into<String>) {
        self.0.push(FieldError::new(field, problem));
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `Ok(value)` when nothing was recorded, else `Err(self)`.
    pub fn into_result<T>(self, value: T) -> Result<T, FieldErrors> {
        if self.0.is_empty() { Ok(value) } else { Err(self) }
    }
}

impl fmt::Display for FieldErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for FieldErrors {}
