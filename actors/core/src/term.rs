//! Terminal sizes fleetd accepts and the paste ids a terminal host remembers: the numbers the
//! slot's core, the config check and the PTY host agree on. The terminal contract itself (launch,
//! connect, channels) is `fleetd_actors::term`.

/// The largest terminal fleetd makes or resizes to (a screen of this size is a few MB in the
/// emulator; 65535 × 65535 would be tens of GB). Sizes outside `MIN..=MAX` are refused where
/// they enter (attach, resize, config) and clamped where they cannot be refused (a PTY host's
/// arguments).
pub const MAX_ROWS: u16 = 500;
pub const MAX_COLS: u16 = 1000;
pub const MIN_ROWS: u16 = 2;
pub const MIN_COLS: u16 = 10;

/// Why `rows` × `cols` is not a terminal size fleetd accepts, if it is not.
pub fn size_problem(rows: u16, cols: u16) -> Option<String> {
    if (MIN_ROWS..=MAX_ROWS).contains(&rows) && (MIN_COLS..=MAX_COLS).contains(&cols) {
        None
    } else {
        Some(format!(
            "a terminal of {rows} rows × {cols} columns is outside {MIN_ROWS}..={MAX_ROWS} rows and {MIN_COLS}..={MAX_COLS} columns"
        ))
    }
}

/// `rows` × `cols` brought inside the accepted bounds.
pub fn clamp_size(rows: u16, cols: u16) -> (u16, u16) {
    (
        rows.clamp(MIN_ROWS, MAX_ROWS),
        cols.clamp(MIN_COLS, MAX_COLS),
    )
}

/// How many paste ids a terminal host remembers (far more than can be in flight: one per
/// turn).
pub const PASTES_REMEMBERED: usize = 256;
