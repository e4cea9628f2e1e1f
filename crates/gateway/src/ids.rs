//! Ids unique across the gateways of one run: gateway `g` (1 to [`MAX_GATEWAY_ID`])
//! numbers its samples and trajectories from `g << ID_BITS`, so the top bits of an id say
//! which gateway issued it and the union of every gateway's ledger never holds one id
//! twice. A gateway alone is gateway 0 and numbers from 0 (from 1 for trajectories), as
//! it always has.

/// Bits of an id numbered within one gateway: about 1.1 trillion samples each.
pub const ID_BITS: u32 = 40;

/// The largest gateway id (ids stay below 2^53, exact in JSON numbers and doubles).
pub const MAX_GATEWAY_ID: u16 = (1 << (53 - ID_BITS)) - 1;

/// The first id of gateway `gateway`'s range.
pub fn id_base(gateway: u16) -> u64 {
    u64::from(gateway) << ID_BITS
}

/// The gateway whose range holds `id`.
pub fn gateway_of(id: u64) -> u64 {
    id >> ID_BITS
}

/// Why `kind` `id` is unknown to gateway `own`, naming the gateway that issued it when
/// another did (an agent that moved gateways mid-episode).
pub(crate) fn unknown(kind: &str, id: u64, own: u16) -> String {
    let issuer = gateway_of(id);
    let a_gateway = (1..=u64::from(MAX_GATEWAY_ID)).contains(&issuer);
    if a_gateway && issuer != u64::from(own) {
        format!(
            "unknown {kind} {id}: gateway {issuer} issued it (its ids start at {issuer} << {ID_BITS}) and this is gateway {own}; an episode lives in the gateway that started it, pinned to its version there: go on through gateway {issuer}, or start a new episode here"
        )
    } else {
        format!("unknown {kind} {id}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_disjoint_and_name_their_gateway() {
        assert_eq!(id_base(0), 0);
        assert_eq!(gateway_of(id_base(3) + 17), 3);
        assert_eq!(gateway_of(id_base(3) - 1), 2);
        let top = id_base(MAX_GATEWAY_ID) + (1 << ID_BITS) - 1;
        assert!(top < 1 << 53, "ids stay exact as doubles");
        assert_eq!(gateway_of(top), u64::from(MAX_GATEWAY_ID));
    }

    #[test]
    fn an_id_from_another_gateway_is_answered_with_where_it_belongs() {
        assert_eq!(unknown("episode", 7, 0), "unknown episode 7");
        let there = unknown("episode", id_base(2) + 7, 1);
        assert!(
            there.contains("gateway 2 issued it") && there.contains("gateway 1"),
            "{there}"
        );
    }
}
