//! The error that ends the executor: a failure it cannot retry its way out of (no enrolment token,
//! a refused credential, an authority it does not trust), which it stops on and says what to do.

/// A failure the executor cannot retry its way out of: it stops and says what to do.
#[derive(Debug)]
pub struct Fatal(pub String);

impl std::fmt::Display for Fatal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Fatal {}
