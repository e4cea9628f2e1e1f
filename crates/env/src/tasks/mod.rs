//! The seeds' target tasks: a 7-joint arm reaching a target, and filling in a form on a
//! screen where popups appear.

mod arm_reach;
pub mod panda;
mod ui_form;

pub use arm_reach::ArmReach;
pub use ui_form::UiForm;
