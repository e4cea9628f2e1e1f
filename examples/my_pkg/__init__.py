"""An example package of Gymnasium envs for `strata train --env gym:my_pkg.envs:make_env`."""
