//! Running code that may panic on hostile input (a damaged file read by a dependency) without the
//! panic's text reaching the operator: the panic becomes an error string the caller reports.
//!
//! Owns one process-wide panic hook that stays silent only on threads inside [`catch`]; it must
//! never swallow a panic anywhere else.

use std::cell::Cell;
use std::sync::Once;

thread_local! {
    static QUIET: Cell<u32> = const { Cell::new(0) };
}

static HOOK: Once = Once::new();

fn install() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if QUIET.with(|q| q.get()) == 0 {
                previous(info);
            }
        }));
    });
}

/// Run `f`; a panic inside it is returned as its message instead of printed.
pub fn catch<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    install();
    QUIET.with(|q| q.set(q.get() + 1));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    QUIET.with(|q| q.set(q.get() - 1));
    r.map_err(|p| {
        p.downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".into())
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_panic_inside_is_an_error_and_the_counter_unwinds() {
        assert_eq!(super::catch(|| 7).unwrap(), 7);
        let e = super::catch(|| -> u8 { panic!("boom {}", 1) }).unwrap_err();
        assert_eq!(e, "boom 1");
        assert_eq!(super::QUIET.with(|q| q.get()), 0);
    }
}
