/* Runs rtld_next_lib's check; exit status 0 when RTLD_NEXT behaves. */
int rtld_next_check(void);

int main(void)
{
    return rtld_next_check();
}
