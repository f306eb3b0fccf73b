//! The errors of one configuration source, collected while it is checked.

use super::ConfigError;

/// Collects every error of one configuration source.
pub(super) struct Ctx<'a> {
    src: &'a str,
    pub(super) errors: Vec<ConfigError>,
}

impl<'a> Ctx<'a> {
    pub(super) fn new(src: &'a str) -> Self {
        Ctx {
            src,
            errors: Vec::new(),
        }
    }

    /// Records that `field` is wrong, and why.
    pub(super) fn err(&mut self, field: impl Into<String>, reason: impl Into<String>) {
        self.errors.push(ConfigError::Invalid {
            source_name: self.src.to_string(),
            field: field.into(),
            reason: reason.into(),
        });
    }

    /// `value` if nothing was wrong, else every error.
    pub(super) fn finish<T>(mut self, value: T) -> Result<T, ConfigError> {
        match self.errors.len() {
            0 => Ok(value),
            1 => Err(self.errors.remove(0)),
            _ => Err(ConfigError::Several(self.errors)),
        }
    }
}
