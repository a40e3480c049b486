// feedguard-controller — watches FencePolicies, streams NodeFences to agents, reports status.
#include "controller/app/controller_app.h"

int main(int argc, char** argv) { return feedguard::controller::RunController(argc, argv); }
