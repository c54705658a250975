//! Configuration errors: a model sized wrongly for its spec or dataset fails with a plain message.

/// Fails with a configuration error (candle's `bail!` would attach a backtrace to a user's mistake).
macro_rules! invalid {
    ($($arg:tt)*) => {
        return Err(candle_core::Error::Msg(format!($($arg)*)))
    };
}
pub(super) use invalid;
