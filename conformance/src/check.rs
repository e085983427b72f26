//! Assertion macros of the cases: each returns a [`Failure`](crate::support::Failure)
//! naming the file, line and values instead of panicking, so a report shows
//! exactly which expectation a backend missed.

/// Fails the case with a message unless `cond` holds.
macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err($crate::support::Failure::Fail(format!(
                "{}:{}: {}",
                file!(),
                line!(),
                format!($($msg)+)
            )));
        }
    };
}

/// Fails the case unless `left == right`, showing both values.
macro_rules! ensure_eq {
    ($left:expr, $right:expr $(,)?) => {
        match (&$left, &$right) {
            (left, right) => {
                if !(*left == *right) {
                    return Err($crate::support::Failure::Fail(format!(
                        "{}:{}: expected {} == {}\n  left: {:?}\n right: {:?}",
                        file!(),
                        line!(),
                        stringify!($left),
                        stringify!($right),
                        left,
                        right
                    )));
                }
            }
        }
    };
    ($left:expr, $right:expr, $($msg:tt)+) => {
        match (&$left, &$right) {
            (left, right) => {
                if !(*left == *right) {
                    return Err($crate::support::Failure::Fail(format!(
                        "{}:{}: {}: expected {} == {}\n  left: {:?}\n right: {:?}",
                        file!(),
                        line!(),
                        format!($($msg)+),
                        stringify!($left),
                        stringify!($right),
                        left,
                        right
                    )));
                }
            }
        }
    };
}

/// Fails the case unless `result` is an error with `code`.
macro_rules! ensure_code {
    ($result:expr, $code:expr) => {
        match $result {
            Ok(value) => {
                return Err($crate::support::Failure::Fail(format!(
                    "{}:{}: expected error {} from {}, but it succeeded with {:?}",
                    file!(),
                    line!(),
                    $code,
                    stringify!($result),
                    value
                )));
            }
            Err(error) => {
                if error.code() != $code {
                    return Err($crate::support::Failure::Fail(format!(
                        "{}:{}: expected error {} from {}, got {}: {}",
                        file!(),
                        line!(),
                        $code,
                        stringify!($result),
                        error.code(),
                        error
                    )));
                }
            }
        }
    };
}

/// Fails the case unless the session's observable state equals `before`
/// (rows, cursors with bookkeeping, dead letters): a failed call changed nothing.
macro_rules! ensure_unchanged {
    ($cx:expr, $session:expr, $before:expr) => {
        let after = $cx.state($session).await?;
        if after != $before {
            return Err($crate::support::Failure::Fail(format!(
                "{}:{}: a failed or no-op call changed the session\n before: {:?}\n  after: {:?}",
                file!(),
                line!(),
                $before,
                after
            )));
        }
    };
}
